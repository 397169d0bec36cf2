;; Answers one decision fewer than it was given inserts.
(module
  (memory (export "memory") 2)
  (func (export "kvmesh_abi_version") (result i32) (i32.const 1))
  (func (export "kvmesh_buffer") (param i32) (result i32) (i32.const 65536))
  (func (export "kvmesh_admit") (param $n i32) (result i32)
    (memory.fill (i32.const 65536) (i32.const 0) (i32.shl (local.get $n) (i32.const 2)))
    (i32.sub (local.get $n) (i32.const 1))))
