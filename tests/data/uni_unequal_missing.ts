@problemName TinyUnequal
@timeStamps false
@missing true
@univariate true
@equalLength false
@classLabel true 0 1 2
@data
1.0,?,3.0:0
2.0,4.0,6.0,8.0,10.0,12.0:2
?,1.5,?,?,3.0,?:1
7:0
