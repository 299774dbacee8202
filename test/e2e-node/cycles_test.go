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
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/e2e-node/nodeframework"
)

// Sizes of what each cycle writes: a new file, and one file rewritten.
const (
	cycleFileBytes = 4 << 10
	hotFileBytes   = 64 << 10
)

// cycle is what one pause -> resume cycle measured.
type cycle struct {
	n int
	// ownLayers are the app image's layers above the original image.
	ownLayers, layers int
	pauseMS           int64
	// commitPush is from the commit step's first log line to the push
	// step's last; snapshot from the snapshot's creation to Succeed;
	// resume from kubectl apply of the pod to Ready.
	commitPush, snapshot, resume time.Duration
	// registryBytes are the blobs the sandbox's images in the registry
	// hold above the original image; liveBytes the files the sandbox wrote
	// and still holds.
	registryBytes, liveBytes int64
}

// TestPauseResumeCycles pauses and resumes one sandbox as OpenSandbox does,
// E2E_CYCLES times (5) with max-layers E2E_CYCLES_MAX_LAYERS (2) under the
// Delete policy: each cycle writes a new file and rewrites one, snapshots
// the sandbox, deletes its pod, creates it again from the pinned imageUris
// and deletes the previous snapshot. Each image stacks at most max-layers
// layers on the original one, exactly as many as the cycles since the last
// squash; after the last resume every file of every cycle is there. With
// E2E_CYCLES_REPORT set, each cycle's figures go to that file
// (test/bench/cycles/run.sh, which runs the long series). Five cycles under
// max-layers 2 squash twice (cycles 3 and 5), so the bound and every squash's
// files are proven in make check.
func TestPauseResumeCycles(t *testing.T) {
	cycles, bound := envInt(t, "E2E_CYCLES", 5), envInt(t, "E2E_CYCLES_MAX_LAYERS", 2)
	var report *bufio.Writer
	if p := os.Getenv("E2E_CYCLES_REPORT"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		report = bufio.NewWriter(f)
		fmt.Fprintln(report, "cycle\town_layers\tlayers\tpause_ms\tcommit_push_ms\tsnapshot_ms\tresume_ms\tregistry_bytes\tlive_bytes")
	}
	nodeframework.SetConfig(t, map[string]any{"max-layers": strconv.Itoa(bound), "image-deletion-policy": "Delete"},
		fmt.Sprintf(`"maxLayers":%d`, bound))
	ns := nodeframework.NewNamespace(t)
	nodeframework.CreateSandbox(t, ns, "cy")
	base := imageLayers(t, nodeframework.LocalRegistry()+"/busybox:latest")

	written := map[string]string{}
	var hot string
	var prev *v1alpha1.SandboxSnapshot
	for i := 1; i <= cycles; i++ {
		path := fmt.Sprintf("/cycle-%03d", i)
		written[path] = writeRandom(t, ns, "cy-0", path, cycleFileBytes)
		hot = writeRandom(t, ns, "cy-0", "/hot", hotFileBytes)

		snap := fmt.Sprintf("cy-%03d", i)
		start := time.Now()
		nodeframework.CreateSnapshot(t, ns, snap, "cy")
		s := nodeframework.WaitForPhase(t, ns, snap, v1alpha1.PhaseSucceed)
		m := cycle{n: i, snapshot: time.Since(start), liveBytes: int64(len(written))*cycleFileBytes + hotFileBytes}
		m.pauseMS, m.commitPush = commitFigures(t, ns, snap)

		layers := imageLayers(t, s.Status.Containers[0].ImageURI)
		m.layers, m.ownLayers = len(layers), len(layers)-len(base)
		if want := (i-1)%bound + 1; m.ownLayers != want {
			t.Errorf("cycle %d: the app image holds %d layers above the original image, want %d (max-layers %d)", i, m.ownLayers, want, bound)
		}

		nodeframework.Run(t, "", "kubectl", "-n", ns, "delete", "pod", "cy-0", "--wait=true", "--timeout=60s")
		start = time.Now()
		nodeframework.ResumePod(t, ns, "cy-0", s, 2*time.Minute)
		m.resume = time.Since(start)
		if prev != nil {
			// As OpenSandbox does after a resume; nothing refers to its
			// images any more, and they go.
			test.DeleteSnapshot(t.Context(), t, nodeframework.Clients(), ns, prev.Name, time.Minute)
			for _, cs := range prev.Status.Containers {
				waitImageGone(t, cs.ImageURI, time.Minute)
			}
		}
		prev = s
		m.registryBytes = registryBytes(t, s, base)
		t.Logf("cycle %d: %d layers (%d own), pause %d ms, commit+push %d ms, snapshot %d ms, resume %d ms, registry %d bytes above the original image, live %d bytes",
			i, m.layers, m.ownLayers, m.pauseMS, m.commitPush.Milliseconds(), m.snapshot.Milliseconds(), m.resume.Milliseconds(), m.registryBytes, m.liveBytes)
		if report != nil {
			fmt.Fprintf(report, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", i, m.ownLayers, m.layers, m.pauseMS,
				m.commitPush.Milliseconds(), m.snapshot.Milliseconds(), m.resume.Milliseconds(), m.registryBytes, m.liveBytes)
			// Each cycle as it ends: a run cut short keeps its figures.
			if err := report.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	for path, sum := range written {
		if got := fileSum(t, ns, "cy-0", path); got != sum {
			t.Errorf("after %d cycles %s holds sha256 %q, want %q", cycles, path, got, sum)
		}
	}
	if got := fileSum(t, ns, "cy-0", "/hot"); got != hot {
		t.Errorf("after %d cycles /hot holds sha256 %q, want the last cycle's %q", cycles, got, hot)
	}
}

// envInt reads a positive whole number from the environment, or def.
func envInt(t *testing.T, key string, def int) int {
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q is not a positive whole number", key, v)
	}
	return n
}

// writeRandom writes size random bytes to path in the app container of a
// pod and returns their sha256.
func writeRandom(t *testing.T, ns, pod, path string, size int) string {
	t.Helper()
	out := nodeframework.Run(t, "", "kubectl", "-n", ns, "exec", pod, "-c", "app", "--", "/bin/sh", "-c",
		`head -c "$1" /dev/urandom > "$2" && sha256sum "$2"`, "sh", strconv.Itoa(size), path)
	return strings.Fields(out)[0]
}

// fileSum returns the sha256 of a file of a pod's app container.
func fileSum(t *testing.T, ns, pod, path string) string {
	t.Helper()
	out, err := nodeframework.TryRun("", "kubectl", "-n", ns, "exec", pod, "-c", "app", "--", "sha256sum", path)
	if err != nil {
		return err.Error()
	}
	return strings.Fields(out)[0]
}

// imageLayers returns the layer digests of an image in the registry.
func imageLayers(t *testing.T, ref string) []string {
	t.Helper()
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(r, remote.WithContext(t.Context()))
	if err != nil {
		t.Fatalf("reading %s: %v", ref, err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range m.Layers {
		out = append(out, l.Digest.String())
	}
	return out
}

// waitImageGone waits until the registry no longer serves ref's manifest.
func waitImageGone(t *testing.T, ref string, within time.Duration) {
	t.Helper()
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	nodeframework.Eventually(t, "image "+ref+" to be deleted", within, func() (bool, error) {
		_, err := remote.Head(r, remote.WithContext(t.Context()))
		return test.RegistryNotFound(err), nil
	})
}

// registryBytes sums the distinct blobs above the original image (layers
// and configs) of the manifests in a snapshot's repositories: what the
// registry holds for the sandbox once its garbage collection has run. The
// loopback registry keeps a tag whose manifest was deleted by digest (a
// distribution registry drops it): such a tag is not counted.
func registryBytes(t *testing.T, s *v1alpha1.SandboxSnapshot, base []string) int64 {
	t.Helper()
	seen := map[string]bool{}
	for _, d := range base {
		seen[d] = true
	}
	var total int64
	for _, cs := range s.Status.Containers {
		ref, err := name.ParseReference(cs.ImageURI, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		tags, err := remote.List(ref.Context(), remote.WithContext(t.Context()))
		if err != nil {
			t.Fatalf("listing %s: %v", ref.Context(), err)
		}
		for _, tag := range tags {
			img, err := remote.Image(ref.Context().Tag(tag), remote.WithContext(t.Context()))
			if err != nil {
				t.Fatal(err)
			}
			d, err := img.Digest()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := remote.Head(ref.Context().Digest(d.String()), remote.WithContext(t.Context())); test.RegistryNotFound(err) {
				continue // deleted with its snapshot
			} else if err != nil {
				t.Fatal(err)
			}
			m, err := img.Manifest()
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range append(m.Layers, m.Config) {
				if !seen[d.Digest.String()] {
					seen[d.Digest.String()] = true
					total += d.Size
				}
			}
		}
	}
	return total
}

// commitFigures returns a snapshot's pause window and the time from its
// commit step's first log line to its push step's last.
func commitFigures(t *testing.T, ns, snapshot string) (int64, time.Duration) {
	t.Helper()
	tr := commitTaskRunOf(t, ns, snapshot)
	var pauseMS int64
	for _, r := range tr.Status.Results {
		if r.Name == task.ResultPauseWindowMS {
			pauseMS, _ = strconv.ParseInt(strings.TrimSpace(r.Value.StringVal), 10, 64)
		}
	}
	stamp := func(step string, last bool) time.Time {
		lines := strings.Split(strings.TrimSpace(nodeframework.Run(t, "", "kubectl", "-n", test.SystemNamespace, "logs", tr.Status.PodName, "-c", "step-"+step)), "\n")
		l := lines[0]
		if last {
			l = lines[len(lines)-1]
		}
		f := strings.Fields(l)
		if len(f) < 2 {
			t.Fatalf("step %s of %s: log line %q has no time", step, tr.Name, l)
		}
		ts, err := time.Parse("2006/01/02 15:04:05.000000", f[0]+" "+f[1])
		if err != nil {
			t.Fatalf("step %s of %s: log line %q: %v", step, tr.Name, l, err)
		}
		return ts
	}
	return pauseMS, stamp(task.StepPush, true).Sub(stamp(task.StepCommit, false))
}
