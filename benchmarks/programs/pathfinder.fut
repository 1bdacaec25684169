-- Minimum-cost path down a grid, one row at a time (a loop of small maps: on GPU backends the host
-- drives one launch per row). Written for pybridge's `pybridge bench programs`.
-- ==
-- random input { [10][100]i32 }
-- random input { [100][10000]i32 }

entry main [rows] [cols] (wall: [rows][cols]i32): [cols]i32 =
  let wall = map (map (\x -> i32.abs (x % 10))) wall
  in loop acc = wall[0] for r in 1...rows - 1 do
       tabulate cols (\j ->
         let l = if j > 0 then acc[j - 1] else i32.highest
         let m = acc[j]
         let rt = if j < cols - 1 then acc[j + 1] else i32.highest
         in wall[r, j] + i32.min m (i32.min l rt))
