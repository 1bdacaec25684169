-- Radix sort of 32-bit keys, two bits per pass (sixteen passes of scan and scatter).
-- Written for pybridge's `pybridge bench programs`.
-- ==
-- random input { [1000]u32 }
-- random input { [100000]u32 }

def step [n] (b: i32) (xs: [n]u32): [n]u32 =
  let digit x = i64.u32 ((x >> u32.i32 b) & 3)
  let counts = map (\d -> map (\x -> i64.bool (digit x == d)) xs) (iota 4)
  let offs = map (scan (+) 0) counts
  let totals = map (\o -> if n == 0 then 0 else o[n - 1]) offs
  let starts = scan (+) 0 totals |> map2 (\t s -> s - t) totals
  let dest = map2 (\i x -> let d = digit x in starts[d] + offs[d, i] - 1) (iota n) xs
  in scatter (copy xs) dest xs

entry main [n] (xs: [n]u32): [n]u32 =
  loop xs for i < 16 do step (2 * i) xs
