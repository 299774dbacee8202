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

package committer

import (
	"errors"
	"fmt"
	"testing"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/checkpoint"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/diskbudget"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/freeze"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
)

// TestFallsBack checks which failed memory snapshots memory-fallback takes
// as filesystem ones: those of a node that cannot checkpoint or has no room
// for the memory, with everything thawed, and only when asked.
func TestFallsBack(t *testing.T) {
	unsupported := fmt.Errorf("pod a/b: %w: criu failed", checkpoint.ErrUnsupported)
	noRoom := fmt.Errorf("pod a/b: %w", diskbudget.ErrNoRoom)
	for _, tc := range []struct {
		name     string
		err      error
		fallback string
		want     bool
	}{
		{"unsupported", unsupported, task.MemoryFallbackFilesystem, true},
		{"no room", noRoom, task.MemoryFallbackFilesystem, true},
		{"unsupported, no fallback asked", unsupported, task.MemoryFallbackNone, false},
		{"no room, no fallback asked", noRoom, task.MemoryFallbackNone, false},
		{"unsupported and not thawed", errors.Join(unsupported, freeze.ErrThawFailed), task.MemoryFallbackFilesystem, false},
		{"past max-pause", fmt.Errorf("%w: criu failed", freeze.ErrMaxPauseExceeded), task.MemoryFallbackFilesystem, false},
		{"push failed", errors.New("push failed"), task.MemoryFallbackFilesystem, false},
		{"succeeded", nil, task.MemoryFallbackFilesystem, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fallsBack(tc.err, tc.fallback); got != tc.want {
				t.Errorf("fallsBack(%v, %s) = %t, want %t", tc.err, tc.fallback, got, tc.want)
			}
		})
	}
}
