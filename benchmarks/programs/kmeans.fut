-- One k-means step: assign points to the nearest centre, new centres and their counts, and the
-- total distance. Written for pybridge's `pybridge bench programs`.
-- ==
-- random input { [8][4]f32 [100][4]f32 }
-- random input { [16][8]f32 [100000][8]f32 }

entry main [k] [d] [n] (centres: [k][d]f32) (points: [n][d]f32): ([k][d]f32, [k]i32, f32) =
  let dist (a: [d]f32) (b: [d]f32) = f32.sum (map2 (\x y -> (x - y) * (x - y)) a b)
  let nearest p = (reduce (\(i, a) (j, b) -> if a < b || (a == b && i < j) then (i, a) else (j, b)) (-1, f32.inf)
                          (map (\c -> dist p c) centres |> zip (iota k)))
  let (which, ds) = unzip (map nearest points)
  let counts = hist (+) 0i32 k which (replicate n 1)
  let sums = hist (map2 (+)) (replicate d 0f32) k which points
  let centres' = map2 (\s c -> map (/ f32.i32 (i32.max c 1)) s) sums counts
  in (centres', counts, f32.sum ds)
