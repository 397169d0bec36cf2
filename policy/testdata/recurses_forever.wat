;; Calls itself without end.
(module
  (memory (export "memory") 2)
  (func (export "kvmesh_abi_version") (result i32) (i32.const 1))
  (func (export "kvmesh_buffer") (param i32) (result i32) (i32.const 65536))
  (func $deeper (export "kvmesh_admit") (param $n i32) (result i32)
    (call $deeper (local.get $n))))
