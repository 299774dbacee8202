/*
Copyright 2026 The OpenSandbox Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package ctrharness

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// TestLinkCarriesAtItsRate sends bytes over a link of 100 MB/s on a clock
// that stands still. An idle link has saved up linkBurst (10 ms, 1 MB) and
// no more, so 30 MB take 290 ms whether they go in one piece, in pieces, or
// from two senders at once; after an idle second, 1 MB goes at once and
// the next 2 MB wait 20 ms.
func TestLinkCarriesAtItsRate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		senders int
		pieces  []int
	}{
		{"one piece", 1, []int{30e6}},
		{"pieces", 1, []int{10e6, 10e6, 10e6}},
		{"two senders", 2, []int{5e6, 10e6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			clock := time.Unix(0, 0)
			now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
			l := newLink(100e6, now, func(time.Duration) {})
			var wg sync.WaitGroup
			for range tc.senders {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for _, n := range tc.pieces {
						l.carry(n)
					}
				}()
			}
			wg.Wait()
			if got, want := l.free.Sub(time.Unix(0, 0)), 290*time.Millisecond; got != want {
				t.Errorf("link busy until +%s, want +%s", got, want)
			}
			var waited []time.Duration
			mu.Lock()
			clock = clock.Add(1300 * time.Millisecond)
			mu.Unlock()
			l.sleep = func(d time.Duration) { waited = append(waited, d) }
			l.carry(1e6)
			l.carry(2e6)
			if want := []time.Duration{0, 20 * time.Millisecond}; !slices.Equal(waited, want) {
				t.Errorf("after an idle second, 1 MB then 2 MB waited %v, want %v", waited, want)
			}
		})
	}
}
