-- Many results from one array: sum, mean, variance, min, max, argmin, argmax, count above mean.
-- Written for pybridge's `pybridge bench programs`.
-- ==
-- random input { [100]f64 }
-- random input { [100000]f64 }
-- random input { [10000000]f64 }

entry main [n] (xs: [n]f64): (f64, f64, f64, f64, f64, i64, i64, i64) =
  let s = f64.sum xs
  let m = s / f64.i64 (i64.max n 1)
  let v = f64.sum (map (\x -> (x - m) * (x - m)) xs) / f64.i64 (i64.max n 1)
  let lo = f64.minimum xs
  let hi = f64.maximum xs
  let ix = iota n
  let (_, amin) = reduce (\(a, i) (b, j) -> if a < b || (a == b && i < j) then (a, i) else (b, j)) (f64.inf, -1) (zip xs ix)
  let (_, amax) = reduce (\(a, i) (b, j) -> if a > b || (a == b && i < j) then (a, i) else (b, j)) (-f64.inf, -1) (zip xs ix)
  let above = i64.sum (map (\x -> i64.bool (x > m)) xs)
  in (s, m, v, lo, hi, amin, amax, above)
