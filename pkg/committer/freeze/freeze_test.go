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

package freeze

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"strings"
	"testing"
	"time"
)

// TestWhileFrozenPastMaxPause checks that a capture cut off at max-pause
// fails as past max-pause alone, keeping its last error's words: a CRIU
// dump cut off there is not a node that cannot take memory snapshots.
func TestWhileFrozenPastMaxPause(t *testing.T) {
	errUnsupported := errors.New("MemorySnapshotUnsupported")
	f := New(nil, Pod{Name: "p", Namespace: "ns", UID: "u"}, Options{MaxPause: 10 * time.Millisecond, Log: log.New(io.Discard, "", 0)})
	_, err := f.WhileFrozen(context.Background(), nil, func(pctx context.Context) error {
		<-pctx.Done()
		return fmt.Errorf("pod ns/p container \"app\": %w: criu failed: type NOTIFY errno 0", errUnsupported)
	})
	if !errors.Is(err, ErrMaxPauseExceeded) || errors.Is(err, errUnsupported) {
		t.Errorf("got %v, want %v and not %v", err, ErrMaxPauseExceeded, errUnsupported)
	}
	if err == nil || !strings.Contains(err.Error(), "criu failed") || !strings.Contains(err.Error(), "max-pause 10ms") {
		t.Errorf("%v does not name the bound and keep the last error's words", err)
	}
}
