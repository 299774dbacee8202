//go:build integration

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

package integration

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/diff"
	"github.com/containerd/containerd/v2/pkg/archive"
	"github.com/containerd/containerd/v2/pkg/archive/compression"
	"github.com/containerd/containerd/v2/pkg/rootfs"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sys/unix"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/oci"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/stage"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/integration/ctrharness"
)

// capV2 is a valid security.capability value (revision 2) granting
// cap_net_bind_service.
func capV2() []byte {
	b := make([]byte, 20)
	binary.LittleEndian.PutUint32(b[0:], 0x02000001)
	binary.LittleEndian.PutUint32(b[4:], 1<<10)
	return b
}

// richBase pushes and pulls an image whose top layer has directories,
// hardlinks, symlinks, setuid and ownership bits and extended attributes.
func (e *testEnv) richBase(t *testing.T) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mt := time.Unix(1700000000, 0)
	add := func(h *tar.Header, body string) {
		h.ModTime, h.Format = mt, tar.FormatPAX
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(body))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if h.Typeflag == tar.TypeDir {
				h.Mode = 0o755
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if body != "" {
			if _, err := tw.Write([]byte(body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	dir := func(n string) { add(&tar.Header{Typeflag: tar.TypeDir, Name: n + "/"}, "") }
	file := func(n, body string) { add(&tar.Header{Typeflag: tar.TypeReg, Name: n}, body) }
	for _, d := range []string{"keep", "keep/deep", "gone", "gone/sub", "redo", "redo/sub"} {
		dir(d)
	}
	file("keep/a.txt", "a")
	file("keep/mod.txt", "before")
	file("keep/del.txt", "delete me")
	file("keep/owned.txt", "owned")
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "keep/suid", Mode: 0o755}, "#!/bin/sh\n")
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "keep/capbin", Mode: 0o755,
		PAXRecords: map[string]string{"SCHILY.xattr.security.capability": string(capV2())}}, "cap")
	file("keep/hl1", "linked")
	add(&tar.Header{Typeflag: tar.TypeLink, Name: "keep/hl2", Linkname: "keep/hl1"}, "")
	add(&tar.Header{Typeflag: tar.TypeSymlink, Name: "keep/sym", Linkname: "a.txt"}, "")
	file("keep/deep/x.txt", "x")
	file("gone/g1", "g1")
	file("gone/sub/g2", "g2")
	file("redo/r1", "r1")
	file("redo/sub/r2", "r2")
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	layerBytes := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerBytes)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		t.Fatal(err)
	}
	img, err := ctrharness.BusyboxImage(true)
	if err != nil {
		t.Fatal(err)
	}
	if img, err = mutate.AppendLayers(img, layer); err != nil {
		t.Fatal(err)
	}
	ref := e.regB.Host + "/base/rich:" + randSuffix()
	if err := ctrharness.PushImage(ref, img); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ctrd.Pull(e.ctrd.Ctx(context.Background()), ref); err != nil {
		t.Fatal(err)
	}
	return ref
}

// changeEverything makes, through a running container's root, every kind of
// change a layer must carry.
func changeEverything(t *testing.T, root string) {
	t.Helper()
	p := func(n string) string { return filepath.Join(root, n) }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(p("new/sub"), 0o755))
	must(os.WriteFile(p("new/a.txt"), []byte("new a"), 0o644))
	must(os.WriteFile(p("new/sub/b.txt"), []byte("new b"), 0o600))
	must(os.WriteFile(p("keep/mod.txt"), []byte("after"), 0o644))
	must(os.Remove(p("keep/del.txt")))
	must(os.RemoveAll(p("gone")))
	// Deleted and recreated: an opaque directory in the upper directory.
	must(os.RemoveAll(p("redo")))
	must(os.MkdirAll(p("redo/sub"), 0o750))
	must(os.WriteFile(p("redo/new.txt"), []byte("recreated"), 0o644))
	// Hardlinks: a new pair, a link to a base file, a base pair broken.
	must(os.WriteFile(p("new/h1"), []byte("hard"), 0o644))
	must(os.Link(p("new/h1"), p("new/h2")))
	must(os.Link(p("keep/a.txt"), p("keep/a-link")))
	must(os.Remove(p("keep/hl2")))
	// Symlinks: a new one, a base one retargeted.
	must(os.Symlink("../keep/mod.txt", p("new/sym")))
	must(os.Remove(p("keep/sym")))
	must(os.Symlink("deep/x.txt", p("keep/sym")))
	// Ownership, setuid, directory mode.
	must(os.Lchown(p("keep/owned.txt"), 1234, 5678))
	must(unix.Chmod(p("keep/suid"), 0o4755))
	must(os.Chmod(p("keep/deep"), 0o700))
	// Extended attributes: a capability added, one removed, a user xattr.
	must(os.WriteFile(p("new/capbin"), []byte("cap2"), 0o755))
	must(unix.Setxattr(p("new/capbin"), "security.capability", capV2(), 0))
	must(unix.Removexattr(p("keep/capbin"), "security.capability"))
	must(os.WriteFile(p("new/noted"), []byte("noted"), 0o644))
	must(unix.Setxattr(p("new/noted"), "user.note", []byte("hello"), 0))
	// A file replaced by a directory and a directory by a file.
	must(os.Remove(p("keep/a.txt")))
	must(os.MkdirAll(p("keep/a.txt/inner"), 0o755))
	must(os.RemoveAll(p("redo/sub")))
	must(os.WriteFile(p("redo/sub"), []byte("now a file"), 0o644))
}

// TestOverlayDifferMatchesWalkingDiffer takes both diffs of the same frozen
// container and checks that each, applied to the base, gives the same
// filesystem: with the changes made before the overlay differ's scan ahead
// of the pause (every probe ready), and after it (probes made in the pause);
// with the upper directory copied by the committer, tarred by containerd,
// and tarred by containerd after the copy failed in the pause.
func TestOverlayDifferMatchesWalkingDiffer(t *testing.T) {
	e := requireEnv(t)
	base := e.richBase(t)
	for _, capture := range []string{captureCopy, captureTar, captureCopyFails} {
		for _, afterScan := range []bool{false, true} {
			name := capture + ", " + map[bool]string{false: "changes before the scan", true: "changes after the scan"}[afterScan]
			t.Run(name, func(t *testing.T) {
				testOverlayEquivalence(t, e, base, capture, afterScan)
			})
		}
	}
}

// How the overlay differ captures the upper directory in the pause.
const (
	captureCopy      = "copied"
	captureTar       = "tarred by containerd"
	captureCopyFails = "copy fails, tarred by containerd"
)

func testOverlayEquivalence(t *testing.T, e *testEnv, base, capture string, afterScan bool) {
	p := e.startPod(t, podContainer{"app", base})
	root := p.rootfs(t, "app")
	if afterScan {
		// Only these directories are there for the scan.
		if err := os.MkdirAll(filepath.Join(root, "new/sub"), 0o755); err != nil {
			t.Fatal(err)
		}
	} else {
		changeEverything(t, root)
	}
	ctx, doneLease, err := e.ctrd.Client.WithLease(e.ctrd.Ctx(context.Background()))
	if err != nil {
		t.Fatal(err)
	}
	defer doneLease(ctx)
	c := e.committer(p.params(t, true, "app="+e.regB.Host+"/snap/equiv:1"), func(cfg *committer.Config) {
		if capture == captureTar {
			cfg.CopyDir = ""
		}
	})
	live, err := c.findLive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l := live[0]
	differ := c.differ()
	plan, err := differ.Plan(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	if plan == nil {
		t.Fatal("the overlay differ does not apply to an overlayfs container here")
	}
	if (plan.CopyDir() != "") != (capture != captureTar) {
		t.Fatalf("copy directory %q with capture %q", plan.CopyDir(), capture)
	}
	defer differ.Release(ctx, l, plan)
	if capture == captureCopyFails {
		// The copy's file is taken: the copy fails in the pause.
		if err := os.WriteFile(filepath.Join(plan.CopyDir(), stage.ContentFile), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The scan before the pause probed the directories there: after the
	// changes, every one they touch; before them, new/sub but not redo,
	// which the pause then probes.
	if !plan.Probed("new/sub") || plan.Probed("redo") == afterScan {
		t.Fatalf("directories probed before the pause: new/sub %v, redo %v", plan.Probed("new/sub"), plan.Probed("redo"))
	}
	if afterScan {
		changeEverything(t, root)
	}
	sn := e.ctrd.Client.SnapshotService(l.Info.Snapshotter)
	if err := l.Task.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	walk, werr := rootfs.CreateDiff(ctx, l.Info.SnapshotKey, sn, e.ctrd.Client.DiffService(),
		diff.WithMediaType(ocispec.MediaTypeImageLayer), diff.WithReference("equiv-walk-"+randSuffix()))
	od, oerr := differ.Diff(ctx, l, plan)
	if err := l.Task.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if werr != nil || oerr != nil {
		t.Fatalf("walking differ: %v; overlay differ: %v", werr, oerr)
	}
	// The layer is what the pause saw, not what the container writes after
	// the thaw, whether the copy or containerd's tar is read.
	for _, n := range []string{"keep/mod.txt", "new/h1"} {
		if err := os.WriteFile(filepath.Join(root, n), []byte("written after the thaw"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if od.Copied() != (capture == captureCopy) {
		t.Fatalf("staged copy %v with capture %q", od.Copied(), capture)
	}
	cs := e.ctrd.Client.ContentStore()
	layer, _, _, err := oci.BuildLayer(ctx, cs, "equiv-layer-"+randSuffix(), func(w io.Writer) error {
		return od.WriteLayer(ctx, cs, w)
	}, ocispec.MediaTypeImageLayerGzip)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("opaque directories: %v", od.Opaque())

	got := e.applyAndScan(t, ctx, base, layer)
	want := e.applyAndScan(t, ctx, base, walk)
	for _, path := range unionKeys(got, want) {
		if got[path] != want[path] {
			t.Errorf("%s:\n  overlay differ: %q\n  walking differ: %q", path, got[path], want[path])
		}
	}
	// The comparison is not vacuous: the changes are there.
	for path, wantPrefix := range map[string]string{
		"new/a.txt":        "-rw-r--r-- 0:0",
		"redo/new.txt":     "-rw-r--r--",
		"keep/owned.txt":   "-rw-r--r-- 1234:5678",
		"keep/suid":        "urwxr-xr-x",
		"new/capbin":       "-rwxr-xr-x 0:0 4 " + sha(t, "cap2"),
		"keep/capbin":      "-rwxr-xr-x 0:0 3 " + sha(t, "cap"),
		"keep/a.txt/inner": "drwxr-xr-x",
		"redo/sub":         "-rw-r--r--",
		"keep/sym":         "Lrwxrwxrwx 0:0 -> deep/x.txt",
		"keep/a-link":      "-rw-r--r-- 0:0 1 " + sha(t, "a"),
		"keep/deep":        "drwx------",
		"new/h2":           "-rw-r--r-- 0:0 4 " + sha(t, "hard"),
		"keep/hl1":         "-rw-r--r--",
		"new/sub/b.txt":    "-rw-------",
		"keep/mod.txt":     "-rw-r--r-- 0:0 5 " + sha(t, "after"),
		"new/sym":          "Lrwxrwxrwx 0:0 -> ../keep/mod.txt",
		"keep/deep/x.txt":  "-rw-r--r--",
		"new/noted":        "-rw-r--r--",
	} {
		if !strings.HasPrefix(got[path], wantPrefix) {
			t.Errorf("%s is %q, want %q...", path, got[path], wantPrefix)
		}
	}
	if !strings.Contains(got["new/capbin"], "xattrs=security.capability:") || strings.Contains(got["keep/capbin"], "security.capability") {
		t.Errorf("capabilities: new/capbin %q, keep/capbin %q", got["new/capbin"], got["keep/capbin"])
	}
	for _, gone := range []string{"keep/del.txt", "gone", "gone/g1", "redo/r1", "redo/sub/r2", "keep/hl2"} {
		if v, ok := got[gone]; ok {
			t.Errorf("%s survived the overlay differ's layer: %q", gone, v)
		}
	}
	if got["hardlinks"] != want["hardlinks"] || !strings.Contains(got["hardlinks"], "new/h1=new/h2") {
		t.Errorf("hardlink groups: overlay %q, walking %q", got["hardlinks"], want["hardlinks"])
	}
}

func sha(t *testing.T, s string) string {
	t.Helper()
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:8])
}

func unionKeys(a, b map[string]string) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range []map[string]string{a, b} {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	sort.Strings(out)
	return out
}

// applyAndScan unpacks the base image's layers and then layer into a new
// directory, with containerd's own applier, and describes every entry of the
// result, plus the hardlink groups under "hardlinks".
func (e *testEnv) applyAndScan(t *testing.T, ctx context.Context, base string, layer ocispec.Descriptor) map[string]string {
	t.Helper()
	// The base layers come from the registry: containerd may hold only
	// their snapshots (another image with the same busybox layer).
	baseLayers, err := remoteImage(t, base).Layers()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	apply := func(rc io.ReadCloser, what string) {
		t.Helper()
		defer rc.Close()
		if _, err := archive.Apply(ctx, dir, rc); err != nil {
			t.Fatalf("applying %s: %v", what, err)
		}
	}
	for _, l := range baseLayers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		apply(rc, "a base layer")
	}
	ra, err := e.ctrd.Client.ContentStore().ReaderAt(ctx, layer)
	if err != nil {
		t.Fatal(err)
	}
	defer ra.Close()
	rc, err := compression.DecompressStream(io.NewSectionReader(ra, 0, ra.Size()))
	if err != nil {
		t.Fatal(err)
	}
	apply(rc, layer.Digest.String())
	return scanTree(t, dir)
}

// scanTree describes every entry under dir but busybox's bin, plus the
// hardlink groups under "hardlinks".
func scanTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	inodes := map[uint64][]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if rel == "." || rel == "bin" || strings.HasPrefix(rel, "bin/") {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		st := info.Sys().(*syscall.Stat_t)
		desc := fmt.Sprintf("%s %d:%d", info.Mode(), st.Uid, st.Gid)
		switch {
		case info.Mode().IsRegular():
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			h := sha256.Sum256(b)
			desc += fmt.Sprintf(" %d %s", len(b), hex.EncodeToString(h[:8]))
			if st.Nlink > 1 {
				inodes[st.Ino] = append(inodes[st.Ino], rel)
			}
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			desc += " -> " + target
		}
		if !info.IsDir() {
			desc += " mtime=" + info.ModTime().UTC().Format(time.RFC3339)
		}
		desc += " xattrs=" + xattrList(path)
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var groups []string
	for _, g := range inodes {
		sort.Strings(g)
		groups = append(groups, strings.Join(g, "="))
	}
	sort.Strings(groups)
	out["hardlinks"] = strings.Join(groups, " ")
	return out
}

// xattrList lists an entry's extended attributes and their values, leaving
// out overlayfs's own.
func xattrList(path string) string {
	sz, err := unix.Llistxattr(path, nil)
	if err != nil || sz == 0 {
		return ""
	}
	buf := make([]byte, sz)
	sz, err = unix.Llistxattr(path, buf)
	if err != nil {
		return "error: " + err.Error()
	}
	var names []string
	for _, n := range strings.Split(string(buf[:sz]), "\x00") {
		if n != "" && !strings.HasPrefix(n, "trusted.overlay.") {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var parts []string
	for _, n := range names {
		v := make([]byte, 256)
		k, _ := unix.Lgetxattr(path, n, v)
		parts = append(parts, n+":"+hex.EncodeToString(v[:max(k, 0)]))
	}
	return strings.Join(parts, ",")
}
