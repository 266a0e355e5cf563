#Multivariate (2 dimensions), unequal lengths, string class labels, a missing value.
@problemName TinyMulti
@timeStamps false
@missing true
@univariate false
@dimensions 2
@equalLength false
@classLabel true walking running
@data
1,2,3:10,20,30:running
4,5:40,?:walking
6,7,8,9:60,70,80,90:running
