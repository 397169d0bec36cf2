;; Spins ten million times per insert (with n the number of inserts), then
;; admits them all with the zero decision: fine for small n, over the
;; deadline's fuel for large n.
(module
  (memory (export "memory") 2)
  (func (export "kvmesh_abi_version") (result i32) (i32.const 1))
  (func (export "kvmesh_buffer") (param i32) (result i32) (i32.const 65536))
  (func (export "kvmesh_admit") (param $n i32) (result i32)
    (local $i i64)
    (local.set $i (i64.mul (i64.extend_i32_u (local.get $n)) (i64.const 10000000)))
    (loop $spin
      (local.set $i (i64.sub (local.get $i) (i64.const 1)))
      (br_if $spin (i64.gt_s (local.get $i) (i64.const 0))))
    (memory.fill (i32.const 65536) (i32.const 0) (i32.shl (local.get $n) (i32.const 2)))
    (local.get $n)))
