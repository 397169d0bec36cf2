;; Observes two batches, then traps on the third: what a slot holds at that
;; moment must be exactly what the native policy would hold.
(module
  (memory (export "memory") 2)
  (func (export "kvmesh_abi_version") (result i32) (i32.const 1))
  (func (export "kvmesh_buffer") (param i32) (result i32) (i32.const 65536))
  (global $calls (mut i32) (i32.const 0))
  (func (export "kvmesh_observe") (param i32) (result i32)
    (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (if (i32.ge_u (global.get $calls) (i32.const 3)) (then unreachable))
    (i32.const 0))
  (func (export "kvmesh_victims") (param i32) (result i32) (i32.const 0)))
