//go:build e2e_node

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

package e2enode

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/sandboxsnapshot/resources/names"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/e2e-node/nodeframework"
)

// The large base: busybox plus largeLayers layers of largeDirs directories
// of largeFiles files each, 4–28 KiB of pseudo-random bytes (about 310 MiB
// in 20,000 files), all derived from the file's path.
const (
	largeLayers = 4
	largeDirs   = 50
	largeFiles  = 100
)

// largeMTime is the files' mtime: whole seconds, as in any registry layer.
var largeMTime = time.Unix(1767225600, 0)

// largePath names file f of directory d of layer l.
func largePath(l, d, f int) string { return fmt.Sprintf("base/l%d/d%02d/f%03d", l, d, f) }

// largeContent is the content of the base file at path.
func largeContent(path string) []byte {
	seed := sha256.Sum256([]byte(path))
	size := 4<<10 + int(binary.LittleEndian.Uint32(seed[:4])%(24<<10))
	b := make([]byte, size)
	_, _ = rand.NewChaCha8(seed).Read(b)
	return b
}

// largeLayer is layer l of the large base, as a stream.
func largeLayer(l int) (v1.Layer, error) {
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() {
			tw := tar.NewWriter(pw)
			dir := func(p string) error {
				return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: p + "/", Mode: 0o755, ModTime: largeMTime})
			}
			err := dir("base")
			if err == nil {
				err = dir(fmt.Sprintf("base/l%d", l))
			}
			for d := 0; d < largeDirs && err == nil; d++ {
				err = dir(fmt.Sprintf("base/l%d/d%02d", l, d))
				for f := 0; f < largeFiles && err == nil; f++ {
					p := largePath(l, d, f)
					b := largeContent(p)
					if err = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: 0o644, Size: int64(len(b)), ModTime: largeMTime}); err == nil {
						_, err = tw.Write(b)
					}
				}
			}
			if err == nil {
				err = tw.Close()
			}
			pw.CloseWithError(err)
		}()
		return pr, nil
	}, tarball.WithCompressionLevel(gzip.BestSpeed))
}

// pushLargeBase builds the large base on top of the node registry's busybox
// and pushes it; the same bytes every run, so the registry keeps one copy.
func pushLargeBase(t *testing.T) string {
	t.Helper()
	ref := nodeframework.LocalRegistry() + "/large-base:v1"
	busybox, err := name.ParseReference(nodeframework.LocalRegistry()+"/busybox:latest", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(busybox)
	if err != nil {
		t.Fatalf("reading %s: %v", busybox, err)
	}
	for l := 0; l < largeLayers; l++ {
		layer, err := largeLayer(l)
		if err != nil {
			t.Fatal(err)
		}
		if img, err = mutate.AppendLayers(img, layer); err != nil {
			t.Fatal(err)
		}
	}
	tag, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img, remote.WithContext(t.Context()), remote.WithJobs(largeLayers)); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	return ref
}

// yesContent is what `yes LINE | head -c n` writes.
func yesContent(line string, n int) []byte {
	return []byte(strings.Repeat(line+"\n", n/(len(line)+1)+1)[:n])
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// changeScript adds, modifies, deletes and replaces files of the large base;
// $1 is a marker unique to the run. expectedAfterChange must match it.
const changeScript = `set -e
mkdir -p /data/added
i=0
while [ $i -lt 200 ]; do yes "$1-$i" | head -c 20000 > /data/added/f$i; i=$((i+1)); done
yes "$1-modified" | head -c 50000 > /base/l1/d03/f012
printf '%s' "$1-appended" >> /base/l2/d04/f005
rm /base/l3/d05/f001
rm -r /base/l3/d07
rm -r /base/l0/d02
mkdir /base/l0/d02
yes "$1-replaced" | head -c 3000 > /base/l0/d02/new
`

// baseHashes is the sha256 of every file of the large base.
func baseHashes() map[string]string {
	want := map[string]string{}
	for l := 0; l < largeLayers; l++ {
		for d := 0; d < largeDirs; d++ {
			for f := 0; f < largeFiles; f++ {
				p := largePath(l, d, f)
				want[p] = sha256Hex(largeContent(p))
			}
		}
	}
	return want
}

// expectedAfterChange is the sha256 of every file under /base and /data
// after changeScript ran with marker.
func expectedAfterChange(marker string) map[string]string {
	want := baseHashes()
	for p := range want {
		if strings.HasPrefix(p, "base/l3/d07/") || strings.HasPrefix(p, "base/l0/d02/") {
			delete(want, p)
		}
	}
	for i := 0; i < 200; i++ {
		want[fmt.Sprintf("data/added/f%d", i)] = sha256Hex(yesContent(fmt.Sprintf("%s-%d", marker, i), 20000))
	}
	want["base/l1/d03/f012"] = sha256Hex(yesContent(marker+"-modified", 50000))
	want["base/l2/d04/f005"] = sha256Hex(append(largeContent("base/l2/d04/f005"), marker+"-appended"...))
	delete(want, "base/l3/d05/f001")
	want["base/l0/d02/new"] = sha256Hex(yesContent(marker+"-replaced", 3000))
	return want
}

// fileHashes lists the sha256 of every file under /base and /data in a
// container, as sha256sum prints them.
func fileHashes(t *testing.T, ns, pod, container string) map[string]string {
	t.Helper()
	out := nodeframework.Run(t, "", "kubectl", "-n", ns, "exec", pod, "-c", container, "--",
		"/bin/sh", "-c", "cd / && find base $(test -d data && echo data) -type f | sort | xargs sha256sum")
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		sum, path, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("sha256sum printed %q", line)
		}
		got[path] = sum
	}
	return got
}

// diffHashes describes how got differs from want, at most a few paths.
func diffHashes(want, got map[string]string) string {
	var out []string
	for _, p := range slices.Sorted(maps.Keys(want)) {
		if g, ok := got[p]; !ok {
			out = append(out, "missing "+p)
		} else if g != want[p] {
			out = append(out, "changed "+p)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[p]; !ok {
			out = append(out, "extra "+p)
		}
	}
	if len(out) > 10 {
		out = append(out[:10], fmt.Sprintf("and %d more", len(out)-10))
	}
	return strings.Join(out, "; ")
}

// TestLargeBaseSnapshotAndResume snapshots a sandbox on a base of about
// 310 MiB in 20,000 files after adding, modifying, deleting and replacing
// files and directories, resumes it from the snapshot's images and reads
// every file back by hash.
func TestLargeBaseSnapshotAndResume(t *testing.T) {
	ns := nodeframework.NewNamespace(t)
	start := time.Now()
	phase := func(what string) {
		t.Logf("%s: %.1f s", what, time.Since(start).Seconds())
		start = time.Now()
	}
	base := pushLargeBase(t)
	phase("large base built and pushed")

	pod := nodeframework.CreateSandboxOf(t, ns, "sb", base, 5*time.Minute)
	phase("sandbox pod on the large base Running")

	marker := strings.TrimSpace(nodeframework.RandomMarker(t, "large"))
	nodeframework.Run(t, "", "kubectl", "-n", ns, "exec", "sb-0", "-c", "app", "--", "/bin/sh", "-c", changeScript, "sh", marker)
	want := expectedAfterChange(marker)
	if got := fileHashes(t, ns, "sb-0", "app"); len(got) != len(want) || diffHashes(want, got) != "" {
		t.Fatalf("before the snapshot the sandbox holds %d files, want %d: %s", len(got), len(want), diffHashes(want, got))
	}
	phase(fmt.Sprintf("files changed and %d hashes checked", len(want)))

	nodeframework.CreateSnapshot(t, ns, "sb-snap", "sb")
	s := nodeframework.WaitForPhase(t, ns, "sb-snap", v1alpha1.PhaseSucceed)
	phase("snapshot Succeed")
	if s.Status.PauseWindowMilliseconds == nil || *s.Status.PauseWindowMilliseconds <= 0 {
		t.Errorf("status.pauseWindowMilliseconds = %v, want a positive value", s.Status.PauseWindowMilliseconds)
	} else {
		t.Logf("pause window on the large base: %d ms", *s.Status.PauseWindowMilliseconds)
	}
	assertUpperCopied(t, s, "app")
	nodeframework.AssertNotPaused(t, pod)

	nodeframework.ResumePod(t, ns, "sb-resumed", s, 5*time.Minute)
	phase("resumed pod Running")

	if got := fileHashes(t, ns, "sb-resumed", "app"); len(got) != len(want) || diffHashes(want, got) != "" {
		t.Errorf("the resumed sandbox holds %d files, want %d: %s", len(got), len(want), diffHashes(want, got))
	}
	// The sidecar changed nothing: it resumes on the base as it was.
	if want, got := baseHashes(), fileHashes(t, ns, "sb-resumed", "sidecar"); len(got) != len(want) || diffHashes(want, got) != "" {
		t.Errorf("the resumed sidecar holds %d files, want the %d of the base: %s", len(got), len(want), diffHashes(want, got))
	}
	phase("files read back by hash")
}

// commitStepLog returns the log of a snapshot's commit step.
func commitStepLog(t *testing.T, s *v1alpha1.SandboxSnapshot) string {
	t.Helper()
	tr, err := nodeframework.Clients().Pipeline.TektonV1().TaskRuns(test.SystemNamespace).Get(t.Context(), names.CommitTaskRun(s), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return nodeframework.Run(t, "", "kubectl", "-n", test.SystemNamespace, "logs", tr.Status.PodName, "-c", "step-commit")
}

// assertUpperCopied checks, in the commit step's log, that the step copied
// the upper directory of container ctr itself: the Task's read-only mount of
// the node's overlayfs snapshots and its capability to read them work in a
// real pod, so containerd did not tar the change inside the pause.
func assertUpperCopied(t *testing.T, s *v1alpha1.SandboxSnapshot, ctr string) {
	t.Helper()
	logs := commitStepLog(t, s)
	want := fmt.Sprintf("container %q", ctr)
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, want) && strings.Contains(l, "copied the upper directory in the pause") {
			t.Logf("commit step: %s", l)
			return
		}
	}
	t.Errorf("the commit step did not copy the upper directory of container %q; its log:\n%s", ctr, logs)
}
