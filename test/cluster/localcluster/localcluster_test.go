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

package localcluster

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestReadEnv(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cluster.env")
	if err := os.WriteFile(path, []byte("# a comment\nMODE=node\nAPISERVER_PORT=1\nAPISERVER_PORT=2\nEMPTY=\nnot a pair\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env, err := ReadEnv(path)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"MODE": "node", "APISERVER_PORT": "2", "EMPTY": ""}
	if diff := cmp.Diff(want, env); diff != "" {
		t.Errorf("ReadEnv (-want +got):\n%s", diff)
	}
}

func TestRunning(t *testing.T) {
	d := DirsAt(t.TempDir())
	if err := os.MkdirAll(d.PIDs, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) {
		if err := os.WriteFile(d.PIDFile(name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("self", strconv.Itoa(os.Getpid())+"\n")
	write("garbage", "x\n")
	if pid, ok := d.Running("self"); !ok || pid != os.Getpid() {
		t.Errorf("Running(self) = %d, %t; want this process", pid, ok)
	}
	for _, name := range []string{"garbage", "missing"} {
		if pid, ok := d.Running(name); ok || pid != 0 {
			t.Errorf("Running(%s) = %d, %t; want none", name, pid, ok)
		}
	}
}
