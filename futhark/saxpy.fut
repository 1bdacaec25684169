-- saxpy: a*x + y, elementwise, in f32 (BLAS level 1).
-- pybridge example catalog: example "saxpy" (pybridge/examples.py); CUDA op "saxpy".

-- | `saxpy a xs ys` is the array `a*xs[i] + ys[i]`.  Both arrays
-- must have the same length (a size mismatch is a runtime error).
entry saxpy [n] (a: f32) (xs: [n]f32) (ys: [n]f32) : [n]f32 =
  map2 (\x y -> a * x + y) xs ys

-- | `iters` rounds of `ys = a*xs + ys`: saxpy iterated inside one call, enough work for one Dask
-- task per GPU (`pybridge bench scaling`, row B1).
entry saxpy_iter [n] (iters: i32) (a: f32) (xs: [n]f32) (ys: [n]f32) : [n]f32 =
  loop ys for _i < iters do map2 (\x y -> a * x + y) xs ys
