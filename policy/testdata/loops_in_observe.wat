;; Starts well, then never returns from kvmesh_observe.
(module
  (memory (export "memory") 2)
  (func (export "kvmesh_abi_version") (result i32) (i32.const 1))
  (func (export "kvmesh_buffer") (param i32) (result i32) (i32.const 65536))
  (func (export "kvmesh_observe") (param i32) (result i32) (loop $forever (br $forever)) (i32.const 0))
  (func (export "kvmesh_victims") (param i32) (result i32) (i32.const 0)))
