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

package proc

import (
	"os"
	"runtime"
	"testing"
	"time"
)

// TestOwnCPUSeconds: spinning shows in this process's CPU time, and a pid
// that does not exist reads as 0.
func TestOwnCPUSeconds(t *testing.T) {
	before := OwnCPUSeconds()
	for deadline := time.Now().Add(10 * time.Second); OwnCPUSeconds()-before < 0.05; {
		if time.Now().After(deadline) {
			t.Fatalf("10 s of spinning added %.2f s of CPU time, want at least 0.05", OwnCPUSeconds()-before)
		}
	}
	if got := CPUSeconds(-1); got != 0 {
		t.Errorf("CPUSeconds(-1) = %v, want 0", got)
	}
}

// TestPeakRSSKiB: this process's peak resident set is at least what it
// holds, and a pid that does not exist reads as 0.
func TestPeakRSSKiB(t *testing.T) {
	held := make([]byte, 64<<20)
	for i := range held {
		held[i] = 1
	}
	if got := PeakRSSKiB(os.Getpid()); got < 64<<10 {
		t.Errorf("PeakRSSKiB = %d KiB while holding 64 MiB", got)
	}
	if got := PeakRSSKiB(-1); got != 0 {
		t.Errorf("PeakRSSKiB(-1) = %v, want 0", got)
	}
	runtime.KeepAlive(held)
}
