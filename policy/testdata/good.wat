;; A correct policy module implementing every slot, written by hand so the
;; host is tested against the ABI itself rather than against the Go SDK.
;;   eviction:  FIFO over inserted blocks (ids kept in an array)
;;   admission: every block written through to disk (DiskNow)
;;   prefetch:  every looked-up block held on disk
(module
  (memory (export "memory") 4)
  (global $buf i32 (i32.const 65536))   ;; exchange buffer, page 1
  (global $ids i32 (i32.const 131072))  ;; tracked ids, pages 2-3
  (global $n (mut i32) (i32.const 0))   ;; how many ids are tracked

  (func (export "kvmesh_abi_version") (result i32) (i32.const 1))

  (func (export "kvmesh_buffer") (param $records i32) (result i32)
    (if (i32.gt_u (i32.mul (local.get $records) (i32.const 48)) (i32.const 65536))
      (then (return (i32.const -1))))
    (global.get $buf))

  ;; index of id among the tracked ids, or -1
  (func $find (param $id i64) (result i32)
    (local $i i32)
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (global.get $n)))
        (if (i64.eq (i64.load (i32.add (global.get $ids) (i32.shl (local.get $i) (i32.const 3)))) (local.get $id))
          (then (return (local.get $i))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (i32.const -1))

  (func (export "kvmesh_observe") (param $count i32) (result i32)
    (local $i i32) (local $rec i32) (local $kind i32) (local $id i64) (local $at i32)
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $count)))
        (local.set $rec (i32.add (global.get $buf) (i32.mul (local.get $i) (i32.const 48))))
        (local.set $kind (i32.load8_u offset=40 (local.get $rec)))
        (local.set $id (i64.load offset=8 (local.get $rec)))
        (local.set $at (call $find (local.get $id)))
        ;; insert: track it once, in arrival order
        (if (i32.and (i32.eq (local.get $kind) (i32.const 1)) (i32.lt_s (local.get $at) (i32.const 0)))
          (then
            (i64.store (i32.add (global.get $ids) (i32.shl (global.get $n) (i32.const 3))) (local.get $id))
            (global.set $n (i32.add (global.get $n) (i32.const 1)))))
        ;; remove or demote: drop it, moving the later ids down to keep the order
        (if (i32.and (i32.ge_u (local.get $kind) (i32.const 4)) (i32.ge_s (local.get $at) (i32.const 0)))
          (then
            (global.set $n (i32.sub (global.get $n) (i32.const 1)))
            (memory.copy
              (i32.add (global.get $ids) (i32.shl (local.get $at) (i32.const 3)))
              (i32.add (global.get $ids) (i32.shl (i32.add (local.get $at) (i32.const 1)) (i32.const 3)))
              (i32.shl (i32.sub (global.get $n) (local.get $at)) (i32.const 3)))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (i32.const 0))

  (func (export "kvmesh_victims") (param $max i32) (result i32)
    (local $k i32)
    (local.set $k (select (local.get $max) (global.get $n) (i32.lt_u (local.get $max) (global.get $n))))
    (memory.copy (global.get $buf) (global.get $ids) (i32.shl (local.get $k) (i32.const 3)))
    (local.get $k))

  (func (export "kvmesh_admit") (param $count i32) (result i32)
    (local $i i32)
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $count)))
        ;; disk=DiskNow(1) replicas=0 ack=memory(0) reserved=0
        (i32.store (i32.add (global.get $buf) (i32.shl (local.get $i) (i32.const 2))) (i32.const 1))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (local.get $count))

  (func (export "kvmesh_prefetch") (param $count i32) (result i32)
    (local $i i32) (local $out i32) (local $rec i32)
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $count)))
        (local.set $rec (i32.add (global.get $buf) (i32.mul (local.get $i) (i32.const 48))))
        ;; a hit (2) on the disk tier (1): the answer is written behind the
        ;; records already read, so it never overwrites one still to come
        (if (i32.and (i32.eq (i32.load8_u offset=40 (local.get $rec)) (i32.const 2))
                     (i32.eq (i32.load8_u offset=41 (local.get $rec)) (i32.const 1)))
          (then
            (i64.store (i32.add (global.get $buf) (i32.shl (local.get $out) (i32.const 3)))
                       (i64.load offset=8 (local.get $rec)))
            (local.set $out (i32.add (local.get $out) (i32.const 1)))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (local.get $out))
)
