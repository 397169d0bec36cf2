;; Hands out an exchange buffer beyond the end of its memory.
(module
  (memory (export "memory") 2)
  (func (export "kvmesh_abi_version") (result i32) (i32.const 1))
  (func (export "kvmesh_buffer") (param i32) (result i32) (i32.const 0x7fff0000))
  (func (export "kvmesh_admit") (param i32) (result i32) (local.get 0)))
