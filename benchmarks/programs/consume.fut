-- In-place updates of a consumed (unique) array: a histogram of small counts written into the
-- caller's buffer. Written for pybridge's `pybridge bench programs`.
-- ==
-- random input { [100]i64 [1000]i64 }
-- random input { [1000]i64 [1000000]i64 }

entry main [m] [n] (counts: *[m]i64) (xs: [n]i64): [m]i64 =
  let idx = map (\x -> i64.abs x % i64.max m 1) xs
  in reduce_by_index counts (+) 0 idx (replicate n 1)
