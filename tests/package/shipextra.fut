-- A second program packaged with shipdemo.fut into one module (tests/test_package.py).

-- | The dot product of two vectors.
entry dot [n] (xs: [n]f32) (ys: [n]f32) : f32 = f32.sum (map2 (*) xs ys)
