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

package checkpoint

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"log"
	"maps"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/freeze"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
)

// TestCheckpointError checks which answers of containerd's task checkpoint
// mean the node cannot take memory snapshots, and that the reason keeps
// runc's and CRIU's own words.
func TestCheckpointError(t *testing.T) {
	d := New(nil, "ns/p (uid u)", log.New(io.Discard, "", 0))
	l := &freeze.Container{Target: task.Target{Container: "app"}}
	for _, tc := range []struct {
		name        string
		err         error
		unsupported bool
		says        string
	}{
		{"no CRIU", errors.New(`runc checkpoint failed: CRIU version check failed: exec: "criu": executable file not found in $PATH: unknown`), true, "executable file not found"},
		{"CRIU refused", errors.New(`criu failed: type NOTIFY errno 0 path= /run/containerd/abc/criu-dump.log: unknown`), true, "criu-dump.log"},
		{"container not running", errors.New(`container abc: not found`), false, "not found"},
		{"socket gone", errors.New("connection error: connection refused"), false, "connection refused"},
	} {
		err := d.dumpError(l, tc.err)
		if errors.Is(err, ErrUnsupported) != tc.unsupported {
			t.Errorf("%s: %v: unsupported = %t, want %t", tc.name, err, !tc.unsupported, tc.unsupported)
		}
		if !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), `container "app"`) {
			t.Errorf("%s: %v does not name the container and say %q", tc.name, err, tc.says)
		}
	}
}

// TestMajorMinor reads containerd's versions as its own builds and
// Debian's spell them.
func TestMajorMinor(t *testing.T) {
	for v, want := range map[string][3]int{
		"v2.1.3":     {2, 1, 1},
		"2.2.0-rc.1": {2, 2, 1},
		"1.6.20~ds1": {1, 6, 1},
		"dev":        {0, 0, 0},
	} {
		major, minor, ok := majorMinor(v)
		if got := [3]int{major, minor, map[bool]int{true: 1}[ok]}; got != want {
			t.Errorf("majorMinor(%q) = %v, want %v", v, got, want)
		}
	}
}

// TestSweepCheckpoints removes the archives of runs that are over from the
// checkpoint directory, and only those: an archive whose Task pod no longer
// runs, however fresh; one whose Task pod runs is kept, however old, as is
// one whose pod containerd cannot tell about; one that names no Task pod
// (an earlier version's, a .tar of older ones) goes after an hour; other
// files are not ours.
func TestSweepCheckpoints(t *testing.T) {
	dir := t.TempDir()
	path := func(name string) string { return filepath.Join(dir, name) }
	over, running := path(ArchiveName("pod-over", "run-a", "app")), path(ArchiveName("pod-running", "run-b", "app"))
	unknown := path(ArchiveName("pod-unknown", "run-c", "app"))
	stale, fresh := path(ArchiveName("", "run-d", "app")), path(ArchiveName("", "run-e", "app"))
	tarball, other := path("run-f-app.tar"), path("notes")
	for _, d := range []string{over, running, unknown, stale, fresh} {
		if err := os.MkdirAll(filepath.Join(d, "checkpoint"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{tarball, other} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * staleCheckpointAge)
	for _, f := range []string{running, unknown, stale, tarball, other} {
		if err := os.Chtimes(f, old, old); err != nil {
			t.Fatal(err)
		}
	}
	asked := map[string]int{}
	runs := func(uid string) (bool, error) {
		asked[uid]++
		switch uid {
		case "pod-running":
			return true, nil
		case "pod-unknown":
			return false, errors.New("containerd is down")
		}
		return false, nil
	}
	var logged bytes.Buffer
	Sweep(dir, runs, log.New(&logged, "", 0))
	for f, want := range map[string]bool{over: false, running: true, unknown: true, stale: false, fresh: true, tarball: false, other: true} {
		if _, err := os.Stat(f); (err == nil) != want {
			t.Errorf("%s: present = %t, want %t", filepath.Base(f), err == nil, want)
		}
	}
	if want := map[string]int{"pod-over": 1, "pod-running": 1, "pod-unknown": 1}; !maps.Equal(asked, want) {
		t.Errorf("asked containerd about %v, want %v", asked, want)
	}
	for _, s := range []string{over + ": the run of Task pod pod-over is over", "keeping checkpoint " + unknown + ": containerd is down"} {
		if !strings.Contains(logged.String(), s) {
			t.Errorf("the log does not say %q:\n%s", s, logged.String())
		}
	}
	// A checkpoint directory that is not there (no memory snapshot yet on
	// the node) is no error.
	logged.Reset()
	Sweep(path("absent"), runs, log.New(&logged, "", 0))
	if logged.Len() > 0 {
		t.Errorf("sweeping an absent directory logged %q", logged.String())
	}
}

// TestArchiveOwner reads the Task pod back from an archive's name, and
// none from names that carry none.
func TestArchiveOwner(t *testing.T) {
	const uid = "5d0c9e2a-1b7f-4c3e-9a60-7f1e2d3c4b5a"
	for name, want := range map[string]string{
		ArchiveName(uid, "7244861d-0adf-4dbe-91a8-b976efd1365b", "app"): uid,
		ArchiveName("", "7244861d-0adf-4dbe-91a8-b976efd1365b", "app"):  "",
		"run-c-app.tar": "",
		"_run-app":      "",
		"a.b_run-app":   "",
	} {
		if got := archiveOwner(name); got != want {
			t.Errorf("archiveOwner(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestRestrictArchive leaves an archive written with loose modes readable
// by root alone: directories 0700, files 0600.
func TestRestrictArchive(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "archive")
	if err := os.MkdirAll(filepath.Join(dir, "checkpoint"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"spec.dump", "checkpoint/pages-1.img"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Restrict(dir); err != nil {
		t.Fatal(err)
	}
	for f, want := range map[string]os.FileMode{"": 0o700, "checkpoint": 0o700, "spec.dump": 0o600, "checkpoint/pages-1.img": 0o600} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		} else if st.Mode().Perm() != want {
			t.Errorf("%q: mode %v, want %v", f, st.Mode().Perm(), want)
		}
	}
}

// TestTarDir writes a checkpoint directory as containerd's CRI lays its
// archive out: names relative to the directory, directories with a slash,
// owned by root, contents intact.
func TestTarDir(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{"checkpoint/pages-1.img": "pages", "spec.dump": "{}", "rootfs-diff.tar": "layer"}
	for name, body := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if err := tarDir(dir, &buf); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&buf)
	got := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s: owner %d:%d, want 0:0", h.Name, h.Uid, h.Gid)
		}
		b, _ := io.ReadAll(tr)
		got[h.Name] = string(b)
	}
	want := map[string]string{"checkpoint/": ""}
	for k, v := range files {
		want[k] = v
	}
	if !maps.Equal(got, want) {
		t.Errorf("tar holds %v, want %v", got, want)
	}
}

// TestCheckpointLayerType compresses a checkpoint's layer when zstd saves
// enough of a sample spread through all its files, and writes a plain tar
// when what dominates does not compress, wherever in the archive it is.
func TestCheckpointLayerType(t *testing.T) {
	random := func(n int) []byte {
		b := make([]byte, n)
		rand.New(rand.NewSource(1)).Read(b)
		return b
	}
	text := func(n int) []byte {
		return bytes.Repeat([]byte("sandbox memory page "), n/20+1)[:n]
	}
	const mib = 1 << 20
	for _, tc := range []struct {
		name  string
		files map[string][]byte
		want  string
	}{{
		name:  "incompressible memory",
		files: map[string][]byte{"checkpoint/pages-1.img": random(8 * mib), "checkpoint/core-1.img": text(4096), "spec.dump": text(2000)},
		want:  ocispec.MediaTypeImageLayer,
	}, {
		name:  "compressible memory",
		files: map[string][]byte{"checkpoint/pages-1.img": text(8 * mib), "spec.dump": text(2000)},
		want:  ocispec.MediaTypeImageLayerZstd,
	}, {
		name:  "incompressible filesystem change after compressible memory",
		files: map[string][]byte{"checkpoint/pages-1.img": text(mib / 2), "rootfs-diff.tar": random(8 * mib)},
		want:  ocispec.MediaTypeImageLayer,
	}, {
		name:  "a little incompressible data among much that compresses",
		files: map[string][]byte{"checkpoint/pages-1.img": text(8 * mib), "rootfs-diff.tar": random(mib / 2)},
		want:  ocispec.MediaTypeImageLayerZstd,
	}, {
		name:  "half zeros",
		files: map[string][]byte{"checkpoint/pages-1.img": append(random(4*mib), make([]byte, 4*mib)...)},
		want:  ocispec.MediaTypeImageLayerZstd,
	}, {
		name:  "smaller than one window",
		files: map[string][]byte{"checkpoint/pages-1.img": text(10000)},
		want:  ocispec.MediaTypeImageLayerZstd,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, body := range tc.files {
				if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, name), body, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, size, err := LayerType(dir)
			if err != nil {
				t.Fatal(err)
			}
			var want int64
			for _, body := range tc.files {
				want += int64(len(body))
			}
			if size != want {
				t.Errorf("the archive's files hold %d bytes, want %d", size, want)
			}
			if got != tc.want {
				saving, _, _ := zstdSaving(dir)
				t.Errorf("layer type %s (zstd saves %.0f%% of the sample), want %s", got, saving*100, tc.want)
			}
		})
	}
}
