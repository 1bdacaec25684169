-- A deliberately wrong program for pybridge.testing's own tests, compiled by the real compiler at
-- test time. pybridge.testing reads the headers below for the shared size n.

-- | The buggy saxpy: it stops one element early, so the last element is 0.
entry saxpy [n] (a: f32) (xs: [n]f32) (ys: [n]f32) : [n]f32 =
  map (\i -> if i < n - 1 then a * xs[i] + ys[i] else 0) (iota n)

-- | The correct one.
entry saxpy_ok [n] (a: f32)
                   (xs: [n]f32) -- a multi-line header, as the parser must handle
                   (ys: [n]f32)
                 : [n]f32 =
  map2 (\x y -> a * x + y) xs ys
