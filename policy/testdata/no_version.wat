;; Exports slot functions but no ABI version: not a kvmesh policy.
(module
  (memory (export "memory") 2)
  (func (export "kvmesh_buffer") (param i32) (result i32) (i32.const 65536))
  (func (export "kvmesh_admit") (param i32) (result i32) (local.get 0)))
