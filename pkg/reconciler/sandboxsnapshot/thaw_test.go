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

package sandboxsnapshot

import (
	"testing"
	"time"
)

// TestThawBackoffAfter checks that the wait doubles from thawBackoff and
// stays at maxThawBackoff however many attempts failed: a sandbox that waits
// hours for room on its node must not be retried in a loop.
func TestThawBackoffAfter(t *testing.T) {
	for attempt, want := range map[int]time.Duration{
		1:    10 * time.Second,
		2:    20 * time.Second,
		5:    160 * time.Second,
		6:    maxThawBackoff,
		40:   maxThawBackoff,
		100:  maxThawBackoff,
		5000: maxThawBackoff,
	} {
		if got := thawBackoffAfter(attempt); got != want {
			t.Errorf("thawBackoffAfter(%d) = %v, want %v", attempt, got, want)
		}
	}
}
