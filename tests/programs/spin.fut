-- tests/gpu/test_exchange_order.py: work still running when an exchange happens.
entry spin (k: i64) (seed: f32) (n: i64) : []f32 =
  map (\i -> loop x = seed + f32.i64 (i % 1000) for _j < k do x * 0.9999f32 + 0.0001f32) (iota n)
entry saxpy (a: f32) (xs: []f32) (ys: []f32) : []f32 = map2 (\x y -> a*x+y) xs ys
