-- Dense matrix multiplication, small (host-bound) to large. Written for pybridge's
-- `pybridge bench programs`.
-- ==
-- random input { [8][8]f32 [8][8]f32 }
-- random input { [64][64]f32 [64][64]f32 }
-- random input { [256][256]f32 [256][256]f32 }

entry main [n] [m] [p] (a: [n][m]f32) (b: [m][p]f32): [n][p]f32 =
  map (\row -> map (\col -> f32.sum (map2 (*) row col)) (transpose b)) a
