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

// TestRefusesBadTunables checks that the committer refuses each
// out-of-bounds tunable param by name, with the controller's bounds, before
// it touches containerd.
func TestRefusesBadTunables(t *testing.T) {
	base := []string{"--pod-name=p", "--pod-namespace=ns", "--pod-uid=u1", "--run-id=r1", "--step=commit",
		"--containerd-address=" + filepath.Join(t.TempDir(), "no-containerd.sock")}
	for _, flag := range []string{
		"--max-layers=" + strconv.Itoa(task.MaxMaxLayers+1),
		"--max-layers=-1",
		"--max-pause=0s",
		"--max-pause=20",
		"--keep-local=yes",
		"--keep-local-max-size=-1Gi",
		"--memory-restore-base=registry.example.com/base:1",
		"--memory-anonymous-pull=Yes",
	} {
		path := filepath.Join(t.TempDir(), "ERROR")
		if got := run(append(append([]string{"--error-result=" + path, flag}, base...), "app=127.0.0.1:5000/a:1")); got != task.ExitCodeThawed {
			t.Errorf("%s: exit code %d, want %d", flag, got, task.ExitCodeThawed)
		}
		param := strings.TrimPrefix(strings.Split(flag, "=")[0], "--")
		if b, _ := os.ReadFile(path); !strings.Contains(string(b), "param "+param+":") {
			t.Errorf("%s: ERROR result %q does not name param %s", flag, b, param)
		}
	}
}

// TestExecuteRefusesBadFlags checks that execute refuses each out-of-bounds
// node flag by name before it touches containerd.
func TestExecuteRefusesBadFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*options)
		want string
	}{
		{"unknown differ", func(o *options) { o.differ = "fast" }, "--differ"},
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
