-- Dot products (f32 and f64) and a plain f32 sum.
-- pybridge example catalog: examples "dot", "dot_f64" and "sum" (the latter paired with the
-- CUDA op "sum").

-- | Dot product of two f32 vectors of the same length:
-- `xs[0]*ys[0] + ... + xs[n-1]*ys[n-1]`, 0 for empty vectors.
entry dot [n] (xs: [n]f32) (ys: [n]f32) : f32 =
  f32.sum (map2 (*) xs ys)

-- | Dot product of two f64 vectors of the same length.
entry dot_f64 [n] (xs: [n]f64) (ys: [n]f64) : f64 =
  f64.sum (map2 (*) xs ys)

-- | Sum of an f32 vector, 0 for an empty one.
entry sum [n] (xs: [n]f32) : f32 =
  f32.sum xs
