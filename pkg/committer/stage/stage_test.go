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

package stage

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOpenWalkedRefusesSwappedEntries swaps a walked file, as a process
// outside the freeze could between the walk and the copy, for a link into
// another pod's files, for a directory link leading to the very inode
// walked, and for another file: each is refused, and only the file the walk
// saw is read.
func TestOpenWalkedRefusesSwappedEntries(t *testing.T) {
	for _, tc := range []struct {
		name string
		swap func(t *testing.T, upper, other string)
	}{
		{"file replaced by a symlink into another pod", func(t *testing.T, upper, other string) {
			must(t, os.Remove(filepath.Join(upper, "a/f")))
			must(t, os.Symlink(filepath.Join(other, "f"), filepath.Join(upper, "a/f")))
		}},
		{"directory replaced by a symlink to where the walked file now is", func(t *testing.T, upper, other string) {
			moved := filepath.Join(other, "moved")
			must(t, os.Rename(filepath.Join(upper, "a"), moved))
			must(t, os.Symlink(moved, filepath.Join(upper, "a")))
		}},
		{"file replaced by another file", func(t *testing.T, upper, _ string) {
			// Made before the walked one goes, so that it has another inode.
			must(t, os.WriteFile(filepath.Join(upper, "a/f.new"), []byte("other"), 0o644))
			must(t, os.Rename(filepath.Join(upper, "a/f.new"), filepath.Join(upper, "a/f")))
		}},
		{"file replaced by a directory", func(t *testing.T, upper, _ string) {
			must(t, os.Remove(filepath.Join(upper, "a/f")))
			must(t, os.Mkdir(filepath.Join(upper, "a/f"), 0o755))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			upper, other, root, id := walkedFile(t)
			tc.swap(t, upper, other)
			f, err := openWalked(root, "a/f", id)
			if err == nil {
				b, _ := io.ReadAll(f)
				f.Close()
				t.Fatalf("opened the swapped entry and read %q", b)
			}
			if !errors.Is(err, errNotWalked) {
				t.Errorf("error %v does not say the entry is not the one walked", err)
			}
		})
	}
	t.Run("unchanged", func(t *testing.T) {
		_, _, root, id := walkedFile(t)
		f, err := openWalked(root, "a/f", id)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if b, _ := io.ReadAll(f); string(b) != "mine" {
			t.Errorf("read %q, want the walked file's content", b)
		}
	})
}

// walkedFile makes an upper directory holding a/f and another pod's
// directory holding f, and returns them, the upper directory opened, and
// a/f's inode as a walk records it.
func walkedFile(t *testing.T) (upper, other string, root int, id fileID) {
	t.Helper()
	dir := t.TempDir()
	upper, other = filepath.Join(dir, "upper"), filepath.Join(dir, "other-pod")
	must(t, os.MkdirAll(filepath.Join(upper, "a"), 0o755))
	must(t, os.MkdirAll(other, 0o755))
	must(t, os.WriteFile(filepath.Join(upper, "a/f"), []byte("mine"), 0o644))
	must(t, os.WriteFile(filepath.Join(other, "f"), []byte("secret"), 0o644))
	fi, err := os.Lstat(filepath.Join(upper, "a/f"))
	must(t, err)
	st := fi.Sys().(*syscall.Stat_t)
	root, err = unix.Open(upper, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(t, err)
	t.Cleanup(func() { unix.Close(root) })
	return upper, other, root, fileID{dev: st.Dev, ino: st.Ino}
}

// TestStageUpperCopiesWalkedFiles stages an upper directory and reads each
// file's content back from the copy.
func TestStageUpperCopiesWalkedFiles(t *testing.T) {
	upper, copies := t.TempDir(), t.TempDir()
	must(t, os.MkdirAll(filepath.Join(upper, "a/b"), 0o755))
	want := map[string]string{"a/f": "one", "a/b/g": "two two", "h": "three"}
	for p, c := range want {
		must(t, os.WriteFile(filepath.Join(upper, p), []byte(c), 0o644))
	}
	must(t, os.Symlink("a/f", filepath.Join(upper, "link")))
	s, err := Copy(context.Background(), upper, copies)
	must(t, err)
	content, err := os.ReadFile(filepath.Join(copies, ContentFile))
	must(t, err)
	got := map[string]string{}
	for _, e := range s.entries {
		if e.hasContent() {
			got[e.hdr.Name] = string(content[e.off : e.off+e.hdr.Size])
		}
	}
	for p, c := range want {
		if got[p] != c {
			t.Errorf("%s: staged %q, want %q", p, got[p], c)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
