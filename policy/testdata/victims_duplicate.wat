;; Names the first block it saw inserted twice in one answer.
(module
  (memory (export "memory") 2)
  (func (export "kvmesh_abi_version") (result i32) (i32.const 1))
  (func (export "kvmesh_buffer") (param i32) (result i32) (i32.const 65536))
  (global $first (mut i64) (i64.const 0))
  (func (export "kvmesh_observe") (param i32) (result i32)
    (if (i64.eqz (global.get $first))
      (then (global.set $first (i64.load offset=8 (i32.const 65536)))))
    (i32.const 0))
  (func (export "kvmesh_victims") (param i32) (result i32)
    (i64.store (i32.const 65536) (global.get $first))
    (i64.store (i32.const 65544) (global.get $first))
    (i32.const 2)))
