package main

import "testing"

func TestBucketWidths(t *testing.T) {
	count := map[int]float64{}
	for age := int64(0); age < 250*(1<<12); age += 250 {
		count[ageBucket(age)] += 250
	}
	for b := 0; b < 48; b++ {
		if count[b] != bucketWidth(b) {
			t.Errorf("bucket %d: %v ms map there, width says %v", b, count[b], bucketWidth(b))
		}
	}
}
