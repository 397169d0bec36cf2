;; An admission policy that reads GPU telemetry: while any GPU's memory is
;; more than half full it keeps new blocks in memory only (DiskNever), else
;; it writes them through (DiskNow). kvmesh_telemetry answers a non-zero
;; status when a reading names a device beyond 15, so the host's handling
;; of a bad answer can be tested too.
(module
  (memory (export "memory") 2)
  (global $buf i32 (i32.const 65536))
  (global $pressed (mut i32) (i32.const 0))

  (func (export "kvmesh_abi_version") (result i32) (i32.const 1))

  (func (export "kvmesh_buffer") (param $records i32) (result i32)
    (if (i32.gt_u (i32.mul (local.get $records) (i32.const 48)) (i32.const 65536))
      (then (return (i32.const -1))))
    (global.get $buf))

  (func (export "kvmesh_telemetry") (param $count i32) (result i32)
    (local $i i32) (local $rec i32) (local $pressed i32)
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $count)))
        (local.set $rec (i32.add (global.get $buf) (i32.mul (local.get $i) (i32.const 48))))
        (if (i32.gt_u (i32.load offset=40 (local.get $rec)) (i32.const 15))
          (then (return (i32.const 7))))
        ;; used * 2 > total
        (if (i64.gt_u (i64.shl (i64.load offset=8 (local.get $rec)) (i64.const 1))
                      (i64.load offset=16 (local.get $rec)))
          (then (local.set $pressed (i32.const 1))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (global.set $pressed (local.get $pressed))
    (i32.const 0))

  (func (export "kvmesh_admit") (param $count i32) (result i32)
    (local $i i32)
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $count)))
        (i32.store (i32.add (global.get $buf) (i32.shl (local.get $i) (i32.const 2)))
                   (select (i32.const 2) (i32.const 1) (global.get $pressed)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (local.get $count))
)
