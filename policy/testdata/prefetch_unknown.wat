;; Asks to warm a block no lookup named.
(module
  (memory (export "memory") 2)
  (func (export "kvmesh_abi_version") (result i32) (i32.const 1))
  (func (export "kvmesh_buffer") (param i32) (result i32) (i32.const 65536))
  (func (export "kvmesh_prefetch") (param i32) (result i32)
    (i64.store (i32.const 65536) (i64.const 424242))
    (i32.const 1)))
