-- The program that tests/toolkit/offbyone.c claims to be (it is written by hand, not compiled;
-- its `saxpy` is wrong on purpose). pybridge.testing reads the headers below for the shared size n.

-- | The (buggy) saxpy: the C implementation leaves the last element 0.
entry saxpy [n] (a: f32) (xs: [n]f32) (ys: [n]f32) : [n]f32 =
  map2 (\x y -> a * x + y) xs ys

-- | The correct one.
entry saxpy_ok [n] (a: f32)
                   (xs: [n]f32) -- a multi-line header, as the parser must handle
                   (ys: [n]f32)
                 : [n]f32 =
  map2 (\x y -> a * x + y) xs ys
