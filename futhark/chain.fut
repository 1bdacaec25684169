-- Chains of 1 to 30 separate `map`s over an f32 array, for the fusion benchmark: Futhark
-- fuses each chain into a single pass.  pybridge example catalog: examples "chain1" ... "chain30";
-- CUDA op "chain" (fused kernel, nops = N).  `op` and chain1/2/4/8/16/30 are exactly those of
-- tests/reference/probe.fut.

-- | One step of the chain: `x * 1.0001 + f32(k) * 0.001`, in f32.
def op (k: i32) (x: f32) : f32 = x * 1.0001f32 + f32.i32 k * 0.001f32

-- | Applies `op 1` to every element (one `map`).
entry chain1 (xs: []f32) : []f32 = xs |> map (op 1)

-- | Applies `op k` for k = 1 to 2, in that order, as 2 separate `map`s.
entry chain2 (xs: []f32) : []f32 = xs |> map (op 1) |> map (op 2)

-- | Applies `op k` for k = 1 to 3, in that order, as 3 separate `map`s.
entry chain3 (xs: []f32) : []f32 = xs |> map (op 1) |> map (op 2) |> map (op 3)

-- | Applies `op k` for k = 1 to 4, in that order, as 4 separate `map`s.
entry chain4 (xs: []f32) : []f32 = xs |> map (op 1) |> map (op 2) |> map (op 3) |> map (op 4)

-- | Applies `op k` for k = 1 to 5, in that order, as 5 separate `map`s.
entry chain5 (xs: []f32) : []f32 = xs |> map (op 1) |> map (op 2) |> map (op 3) |> map (op 4) |> map (op 5)

-- | Applies `op k` for k = 1 to 6, in that order, as 6 separate `map`s.
entry chain6 (xs: []f32) : []f32 = xs |> map (op 1) |> map (op 2) |> map (op 3) |> map (op 4) |> map (op 5) |> map (op 6)

-- | Applies `op k` for k = 1 to 7, in that order, as 7 separate `map`s.
entry chain7 (xs: []f32) : []f32 = xs |> map (op 1) |> map (op 2) |> map (op 3) |> map (op 4) |> map (op 5) |> map (op 6) |> map (op 7)

-- | Applies `op k` for k = 1 to 8, in that order, as 8 separate `map`s.
entry chain8 (xs: []f32) : []f32 = xs |> map (op 1) |> map (op 2) |> map (op 3) |> map (op 4) |> map (op 5) |> map (op 6) |> map (op 7) |> map (op 8)

-- | Applies `op k` for k = 1 to 9, in that order, as 9 separate `map`s.
entry chain9 (xs: []f32) : []f32 = xs |> map (op 1) |> map (op 2) |> map (op 3) |> map (op 4) |> map (op 5) |> map (op 6) |> map (op 7) |> map (op 8) |> map (op 9)

-- | Applies `op k` for k = 1 to 10, in that order, as 10 separate `map`s.
entry chain10 (xs: []f32) : []f32 = xs |> map (op 1) |> map (op 2) |> map (op 3) |> map (op 4) |> map (op 5) |> map (op 6) |> map (op 7) |> map (op 8) |> map (op 9) |> map (op 10)

-- | Applies `op k` for k = 1 to 11, in that order, as 11 separate `map`s.
entry chain11 (xs: []f32) : []f32 = xs |> map (op 1) |> map (op 2) |> map (op 3) |> map (op 4) |> map (op 5) |> map (op 6) |> map (op 7) |> map (op 8) |> map (op 9) |> map (op 10) |> map (op 11)

-- | Applies `op k` for k = 1 to 12, in that order, as 12 separate `map`s.
entry chain12 (xs: []f32) : []f32 = xs |> map (op 1) |> map (op 2) |> map (op 3) |> map (op 4) |> map (op 5) |> map (op 6) |> map (op 7) |> map (op 8) |> map (op 9) |> map (op 10) |> map (op 11) |> map (op 12)

-- | Applies `op k` for k = 1 to 13, in that order, as 13 separate `map`s.
entry chain13 (xs: []f32) : []f32 = xs |> map (op 1) |> map (op 2) |> map (op 3) |> map (op 4) |> map (op 5) |> map (op 6) |> map (op 7) |> map (op 8) |> map (op 9) |> map (op 10) |> map (op 11) |> map (op 12) |> map (op 13)

-- | Applies `op k` for k = 1 to 14, in that order, as 14 separate `map`s.
entry chain14 (xs: []f32) : []f32 = xs |> map (op 1) |> map (op 2) |> map (op 3) |> map (op 4) |> map (op 5) |> map (op 6) |> map (op 7) |> map (op 8) |> map (op 9) |> map (op 10) |> map (op 11) |> map (op 12) |> map (op 13) |> map (op 14)

-- | Applies `op k` for k = 1 to 15, in that order, as 15 separate `map`s.
entry chain15 (xs: []f32) : []f32 = xs |> map (op 1) |> map (op 2) |> map (op 3) |> map (op 4) |> map (op 5) |> map (op 6) |> map (op 7) |> map (op 8) |> map (op 9) |> map (op 10) |> map (op 11) |> map (op 12) |> map (op 13) |> map (op 14) |> map (op 15)

-- | Applies `op k` for k = 1 to 16, in that order, as 16 separate `map`s.
entry chain16 (xs: []f32) : []f32 = xs |> map (op 1) |> map (op 2) |> map (op 3) |> map (op 4) |> map (op 5) |> map (op 6) |> map (op 7) |> map (op 8) |> map (op 9) |> map (op 10) |> map (op 11) |> map (op 12) |> map (op 13) |> map (op 14) |> map (op 15) |> map (op 16)

-- | Applies `op k` for k = 1 to 17, in that order, as 17 separate `map`s.
entry chain17 (xs: []f32) : []f32 = xs |> map (op 1) |> map (op 2) |> map (op 3) |> map (op 4) |> map (op 5) |> map (op 6) |> map (op 7) |> map (op 8) |> map (op 9) |> map (op 10) |> map (op 11) |> map (op 12) |> map (op 13) |> map (op 14) |> map (op 15) |> map (op 16) |> map (op 17)

-- | Applies `op k` for k = 1 to 18, in that order, as 18 separate `map`s.
entry chain18 (xs: []f32) : []f32 = xs |> map (op 1) |> map (op 2) |> map (op 3) |> map (op 4) |> map (op 5) |> map (op 6) |> map (op 7) |> map (op 8) |> map (op 9) |> map (op 10) |> map (op 11) |> map (op 12) |> map (op 13) |> map (op 14) |> map (op 15) |> map (op 16) |> map (op 17) |> map (op 18)

-- | Applies `op k` for k = 1 to 19, in that order, as 19 separate `map`s.
entry chain19 (xs: []f32) : []f32 = xs |> map (op 1) |> map (op 2) |> map (op 3) |> map (op 4) |> map (op 5) |> map (op 6) |> map (op 7) |> map (op 8) |> map (op 9) |> map (op 10) |> map (op 11) |> map (op 12) |> map (op 13) |> map (op 14) |> map (op 15) |> map (op 16) |> map (op 17) |> map (op 18) |> map (op 19)

-- | Applies `op k` for k = 1 to 20, in that order, as 20 separate `map`s.
entry chain20 (xs: []f32) : []f32 = xs |> map (op 1) |> map (op 2) |> map (op 3) |> map (op 4) |> map (op 5) |> map (op 6) |> map (op 7) |> map (op 8) |> map (op 9) |> map (op 10) |> map (op 11) |> map (op 12) |> map (op 13) |> map (op 14) |> map (op 15) |> map (op 16) |> map (op 17) |> map (op 18) |> map (op 19) |> map (op 20)

-- | Applies `op k` for k = 1 to 21, in that order, as 21 separate `map`s.
entry chain21 (xs: []f32) : []f32 = xs |> map (op 1) |> map (op 2) |> map (op 3) |> map (op 4) |> map (op 5) |> map (op 6) |> map (op 7) |> map (op 8) |> map (op 9) |> map (op 10) |> map (op 11) |> map (op 12) |> map (op 13) |> map (op 14) |> map (op 15) |> map (op 16) |> map (op 17) |> map (op 18) |> map (op 19) |> map (op 20) |> map (op 21)

-- | Applies `op k` for k = 1 to 22, in that order, as 22 separate `map`s.
entry chain22 (xs: []f32) : []f32 = xs |> map (op 1) |> map (op 2) |> map (op 3) |> map (op 4) |> map (op 5) |> map (op 6) |> map (op 7) |> map (op 8) |> map (op 9) |> map (op 10) |> map (op 11) |> map (op 12) |> map (op 13) |> map (op 14) |> map (op 15) |> map (op 16) |> map (op 17) |> map (op 18) |> map (op 19) |> map (op 20) |> map (op 21) |> map (op 22)

-- | Applies `op k` for k = 1 to 23, in that order, as 23 separate `map`s.
entry chain23 (xs: []f32) : []f32 = xs |> map (op 1) |> map (op 2) |> map (op 3) |> map (op 4) |> map (op 5) |> map (op 6) |> map (op 7) |> map (op 8) |> map (op 9) |> map (op 10) |> map (op 11) |> map (op 12) |> map (op 13) |> map (op 14) |> map (op 15) |> map (op 16) |> map (op 17) |> map (op 18) |> map (op 19) |> map (op 20) |> map (op 21) |> map (op 22) |> map (op 23)

-- | Applies `op k` for k = 1 to 24, in that order, as 24 separate `map`s.
entry chain24 (xs: []f32) : []f32 = xs |> map (op 1) |> map (op 2) |> map (op 3) |> map (op 4) |> map (op 5) |> map (op 6) |> map (op 7) |> map (op 8) |> map (op 9) |> map (op 10) |> map (op 11) |> map (op 12) |> map (op 13) |> map (op 14) |> map (op 15) |> map (op 16) |> map (op 17) |> map (op 18) |> map (op 19) |> map (op 20) |> map (op 21) |> map (op 22) |> map (op 23) |> map (op 24)

-- | Applies `op k` for k = 1 to 25, in that order, as 25 separate `map`s.
entry chain25 (xs: []f32) : []f32 = xs |> map (op 1) |> map (op 2) |> map (op 3) |> map (op 4) |> map (op 5) |> map (op 6) |> map (op 7) |> map (op 8) |> map (op 9) |> map (op 10) |> map (op 11) |> map (op 12) |> map (op 13) |> map (op 14) |> map (op 15) |> map (op 16) |> map (op 17) |> map (op 18) |> map (op 19) |> map (op 20) |> map (op 21) |> map (op 22) |> map (op 23) |> map (op 24) |> map (op 25)

-- | Applies `op k` for k = 1 to 26, in that order, as 26 separate `map`s.
entry chain26 (xs: []f32) : []f32 = xs |> map (op 1) |> map (op 2) |> map (op 3) |> map (op 4) |> map (op 5) |> map (op 6) |> map (op 7) |> map (op 8) |> map (op 9) |> map (op 10) |> map (op 11) |> map (op 12) |> map (op 13) |> map (op 14) |> map (op 15) |> map (op 16) |> map (op 17) |> map (op 18) |> map (op 19) |> map (op 20) |> map (op 21) |> map (op 22) |> map (op 23) |> map (op 24) |> map (op 25) |> map (op 26)

-- | Applies `op k` for k = 1 to 27, in that order, as 27 separate `map`s.
entry chain27 (xs: []f32) : []f32 = xs |> map (op 1) |> map (op 2) |> map (op 3) |> map (op 4) |> map (op 5) |> map (op 6) |> map (op 7) |> map (op 8) |> map (op 9) |> map (op 10) |> map (op 11) |> map (op 12) |> map (op 13) |> map (op 14) |> map (op 15) |> map (op 16) |> map (op 17) |> map (op 18) |> map (op 19) |> map (op 20) |> map (op 21) |> map (op 22) |> map (op 23) |> map (op 24) |> map (op 25) |> map (op 26) |> map (op 27)

-- | Applies `op k` for k = 1 to 28, in that order, as 28 separate `map`s.
entry chain28 (xs: []f32) : []f32 = xs |> map (op 1) |> map (op 2) |> map (op 3) |> map (op 4) |> map (op 5) |> map (op 6) |> map (op 7) |> map (op 8) |> map (op 9) |> map (op 10) |> map (op 11) |> map (op 12) |> map (op 13) |> map (op 14) |> map (op 15) |> map (op 16) |> map (op 17) |> map (op 18) |> map (op 19) |> map (op 20) |> map (op 21) |> map (op 22) |> map (op 23) |> map (op 24) |> map (op 25) |> map (op 26) |> map (op 27) |> map (op 28)

-- | Applies `op k` for k = 1 to 29, in that order, as 29 separate `map`s.
entry chain29 (xs: []f32) : []f32 = xs |> map (op 1) |> map (op 2) |> map (op 3) |> map (op 4) |> map (op 5) |> map (op 6) |> map (op 7) |> map (op 8) |> map (op 9) |> map (op 10) |> map (op 11) |> map (op 12) |> map (op 13) |> map (op 14) |> map (op 15) |> map (op 16) |> map (op 17) |> map (op 18) |> map (op 19) |> map (op 20) |> map (op 21) |> map (op 22) |> map (op 23) |> map (op 24) |> map (op 25) |> map (op 26) |> map (op 27) |> map (op 28) |> map (op 29)

-- | Applies `op k` for k = 1 to 30, in that order, as 30 separate `map`s.
entry chain30 (xs: []f32) : []f32 = xs |> map (op 1) |> map (op 2) |> map (op 3) |> map (op 4) |> map (op 5) |> map (op 6) |> map (op 7) |> map (op 8) |> map (op 9) |> map (op 10) |> map (op 11) |> map (op 12) |> map (op 13) |> map (op 14) |> map (op 15) |> map (op 16) |> map (op 17) |> map (op 18) |> map (op 19) |> map (op 20) |> map (op 21) |> map (op 22) |> map (op 23) |> map (op 24) |> map (op 25) |> map (op 26) |> map (op 27) |> map (op 28) |> map (op 29) |> map (op 30)
