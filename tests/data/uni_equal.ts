# A hand-written univariate, equal-length problem in the UCR/UEA .ts format.
# Comments and blank lines are ignored.

@problemName TinyUni
@timeStamps false
@missing false
@univariate true
@equalLength true
@seriesLength 5
@classLabel true 1 2
@data
1.0,2.0,3.0,4.0,5.0:1
5,4,3,2,1:2
0.5,0.5,0.5,0.5,0.5:1
