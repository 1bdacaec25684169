-- Histograms: bins from integer division and remainder, counted with reduce_by_index.
-- Written for pybridge's `pybridge bench programs`.
-- ==
-- random input { 64i64 [1000]i32 }
-- random input { 256i64 [1000000]i32 }

entry main [n] (bins: i64) (xs: [n]i32): ([]i32, i32, i32) =
  let bins = 1 + i64.abs bins % 4096
  let idx = map (\x -> (i64.i32 (i32.abs (x / 7)) % bins)) xs
  let h = hist (+) 0i32 bins idx (replicate n 1i32)
  in (h, i32.maximum h, i32.minimum h)
