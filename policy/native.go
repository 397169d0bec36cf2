package policy

// WriteBack is the native admission policy: every block lives in memory,
// is demoted to disk when memory evicts it, and is acknowledged as the
// client asked.
type WriteBack struct{}

// Admit implements Admission.
func (WriteBack) Admit(inserts []Event, dst []Decision) []Decision {
	for range inserts {
		dst = append(dst, Decision{Disk: DiskOnEvict})
	}
	return dst
}

// WarmPrefix is the native prefetch policy: a lookup is usually followed by
// reads of the blocks it found, so every disk-resident block of the present
// leading run is warmed into memory.
type WarmPrefix struct{}

// Prefetch implements Prefetch.
func (WarmPrefix) Prefetch(lookup []Event, dst []uint64) []uint64 {
	for _, e := range lookup {
		if e.Kind != EventHit {
			break
		}
		if e.Tier == TierDisk {
			dst = append(dst, e.ID)
		}
	}
	return dst
}
