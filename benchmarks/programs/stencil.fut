-- A 2D five-point Jacobi stencil on a flattened grid: row and column come from index division,
-- the hot integer arithmetic that pybridge's C hardening touches. Written for pybridge's
-- `pybridge bench programs`.
-- ==
-- random input { 10i32 [64]i64 [4096]f32 }
-- random input { 20i32 [512]i64 [262144]f32 }

entry main [w] [n] (iters: i32) (_shape: [w]i64) (grid: [n]f32): [n]f32 =
  let h = n / w
  in loop g = grid for _i < (iters & 31) do
       tabulate n (\i ->
         let r = i / w
         let c = i % w
         let at rr cc = if rr >= 0 && rr < h && cc >= 0 && cc < w then g[rr * w + cc] else 0f32
         in 0.2f32 * (g[i] + at (r - 1) c + at (r + 1) c + at r (c - 1) + at r (c + 1)))
