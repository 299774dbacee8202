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

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/checkpoint"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/diskbudget"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/freeze"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
)

// TestFailExitCodes checks the exit code the operator reads for each kind of
// failure, and that the ERROR result is written.
func TestFailExitCodes(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"failed and thawed", errors.New("push failed"), task.ExitCodeThawed},
		{"thaw failed", fmt.Errorf("diff: %w", freeze.ErrThawFailed), 3},
		{"frozen elsewhere", fmt.Errorf("pod a/b: %w", freeze.ErrFrozenElsewhere), task.ExitCodeFrozenElsewhere},
		{"memory unsupported", fmt.Errorf("pod a/b: %w: criu failed", checkpoint.ErrUnsupported), task.ExitCodeMemoryUnsupported},
		{"no room for the memory", fmt.Errorf("pod a/b: %w: 256 MiB in checkpoint-dir /c", diskbudget.ErrNoRoom), task.ExitCodeThawed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ERROR")
			if got := fail(options{errorPath: path}, tc.err); got != tc.want {
				t.Errorf("exit code %d, want %d", got, tc.want)
			}
			if b, err := os.ReadFile(path); err != nil || string(b) != tc.err.Error() {
				t.Errorf("ERROR result %q (%v), want %q", b, err, tc.err)
			}
		})
	}
}

// TestRequiredIDs checks that the committer refuses to start without the
// pod UID or the run ID.
func TestRequiredIDs(t *testing.T) {
	base := []string{"--pod-name=p", "--pod-namespace=ns", "--pod-uid=u1", "--run-id=r1", "--step=commit", "app=127.0.0.1:5000/a:1"}
	for _, drop := range []string{"--pod-uid=u1", "--run-id=r1"} {
		var args []string
		for _, a := range base {
			if a != drop {
				args = append(args, a)
			}
		}
		path := filepath.Join(t.TempDir(), "ERROR")
		if got := run(append([]string{"--error-result=" + path}, args...)); got != task.ExitCodeThawed {
			t.Errorf("without %s: exit code %d, want %d", drop, got, task.ExitCodeThawed)
		}
		param := strings.TrimPrefix(strings.Split(drop, "=")[0], "--")
		if b, _ := os.ReadFile(path); !strings.Contains(string(b), "param "+param+" is empty") {
			t.Errorf("without %s: ERROR result %q does not name param %s", drop, b, param)
		}
	}
}

// TestExecuteRefusesBadFlags checks that execute refuses each out-of-bounds
// flag by name before it touches containerd, with the controller's bounds.
func TestExecuteRefusesBadFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*options)
		want string
	}{
		{"max-layers past the controller's bound", func(o *options) { o.maxLayers = strconv.Itoa(task.MaxMaxLayers + 1) }, "--max-layers"},
		{"negative max-layers", func(o *options) { o.maxLayers = "-1" }, "--max-layers"},
		{"max-pause zero", func(o *options) { o.maxPause = "0s" }, "--max-pause"},
		{"max-pause not a duration", func(o *options) { o.maxPause = "20" }, "--max-pause"},
		{"keep-local-max-size negative", func(o *options) { o.keepLocalMax = "-1Gi" }, "--keep-local-max-size"},
		{"unknown differ", func(o *options) { o.differ = "fast" }, "--differ"},
		{"keep-local not a boolean", func(o *options) { o.keepLocal = "yes" }, "--keep-local"},
		{"scratch-limit not a number of bytes", func(o *options) { o.scratchLimit = "20Gi" }, "--scratch-limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o options
			if err := newFlagSet(&o).Parse(nil); err != nil {
				t.Fatal(err)
			}
			o.address = filepath.Join(t.TempDir(), "no-containerd.sock")
			tc.set(&o)
			err := execute(t.Context(), o, &task.Params{Mode: task.ModeCommit}, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("execute() = %v, want an error naming %s", err, tc.want)
			}
		})
	}
}
