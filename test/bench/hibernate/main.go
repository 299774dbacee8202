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

// Command bench-hibernate measures memory snapshots on a private containerd
// with its CRI on (CONTAINERD_BIN, 2.1 or later) and CRIU (CRIU_DIR), as a
// kubelet drives them: a process holding N MiB resident (filled with
// incompressible bytes) is checkpointed by the committer, pushed to a
// loopback registry (behind a paced link with --registry-mbit) and restored
// into a new pod, once with the image kept on the node and once pulled. It
// prints, per size, medians of the iterations: the freeze, the whole
// checkpoint (the freeze and the rest of the archive: all the commit step
// does) and the CPU time the committer and containerd spent on it, the push
// (building the image as it uploads it, and keeping it on the node) and
// containerd's CPU time in it, the two together, the image's size
// against the resident memory, and the restore to a first successful exec.
// It needs root. Run it through test/bench/hibernate/run.sh.
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/opencontainers/go-digest"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/integration/ctrharness"
	"github.com/opensandbox-group/sandbox-snapshot-operator/test/proc"
)

func main() {
	hog := flag.String("hog", "", "static binary that holds --mib MiB resident until killed (test/bench/hibernate/run.sh builds it)")
	sizes := flag.String("sizes", "64,256,1024", "resident MiB of the checkpointed process, comma-separated")
	iterations := flag.Int("iterations", 3, "runs per size; medians are reported")
	mbit := flag.Int64("registry-mbit", 0, "link to the registry, in Mbit/s, both ways together (0: unpaced loopback)")
	flag.Parse()
	if err := run(*hog, *sizes, *iterations, *mbit); err != nil {
		fmt.Fprintln(os.Stderr, "bench-hibernate:", err)
		os.Exit(1)
	}
}

// sample is one memory snapshot and its two restores.
type sample struct {
	freeze, checkpoint, push    time.Duration
	total                       time.Duration // checkpoint and push
	committerCPU, containerdCPU time.Duration // during the checkpoint
	pushContainerdCPU           time.Duration // containerd's, during the push
	imageBytes, archiveBytes    int64
	restoreLocal, restorePulled time.Duration
}

func run(hog string, sizes string, iterations int, mbit int64) error {
	if hog == "" || os.Getenv("CRIU_DIR") == "" {
		return fmt.Errorf("--hog and CRIU_DIR are required")
	}
	reg, link := ctrharness.NewRegistry(), "loopback, unpaced"
	if mbit > 0 {
		reg, link = ctrharness.NewRegistryBehindLink(mbit*1e6/8), fmt.Sprintf("a %d Mbit/s link", mbit)
	}
	defer reg.Close()
	base := reg.Host + "/bench/hog:latest"
	sandboxImage := reg.Host + "/bench/pause:latest"
	if err := pushImages(hog, base, sandboxImage); err != nil {
		return err
	}
	cri, err := ctrharness.StartCRI(ctrharness.Bin(), ctrharness.CRIOptions{SandboxImage: sandboxImage, Registry: reg.Host, Path: []string{os.Getenv("CRIU_DIR")}})
	if err != nil {
		return err
	}
	defer cri.Stop()
	work, err := os.MkdirTemp("", "bench-hibernate-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	fmt.Printf("%s, CRIU from %s, registry over %s, %d iterations per size\n\n", cri.Version, os.Getenv("CRIU_DIR"), link, iterations)
	fmt.Println("| resident | freeze | checkpoint (the commit step) | per GiB | its CPU: committer / containerd | push (image built as uploaded) | containerd's CPU in it | checkpoint + push | image | image / resident | restore, kept on the node | restore, pulled |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, f := range strings.Split(sizes, ",") {
		mib, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("--sizes: %q is not a number of MiB", f)
		}
		var ss []sample
		for i := 0; i < iterations; i++ {
			s, err := once(cri, base, work, mib, i)
			if err != nil {
				return fmt.Errorf("%d MiB, run %d: %w", mib, i, err)
			}
			ss = append(ss, s)
		}
		m := median(ss)
		resident := int64(mib) << 20
		fmt.Printf("| %d MiB | %d ms | %d ms | %.2f s | %.1f / %.1f s | %d ms | %.1f s | %d ms | %.1f MiB (archive %.1f MiB) | %.2f | %d ms | %d ms |\n",
			mib, m.freeze.Milliseconds(), m.checkpoint.Milliseconds(), m.checkpoint.Seconds()*1024/float64(mib),
			m.committerCPU.Seconds(), m.containerdCPU.Seconds(), m.push.Milliseconds(), m.pushContainerdCPU.Seconds(), m.total.Milliseconds(),
			float64(m.imageBytes)/(1<<20), float64(m.archiveBytes)/(1<<20), float64(m.imageBytes)/float64(resident),
			m.restoreLocal.Milliseconds(), m.restorePulled.Milliseconds())
	}
	return nil
}

// once starts a pod holding mib MiB, checkpoints and pushes it, and
// restores it twice: from the image kept on the node, then pulled.
func once(cri *ctrharness.Containerd, base, work string, mib, i int) (sample, error) {
	ctx := context.Background()
	var s sample
	name := fmt.Sprintf("hog-%d-%d", mib, i)
	pod, err := cri.RunPod(ctx, name, "bench", name+"-uid")
	if err != nil {
		return s, err
	}
	defer cri.RemovePod(ctx, pod)
	id, err := cri.StartContainer(ctx, pod, "app", base, "/bin/hog", strconv.Itoa(mib))
	if err != nil {
		return s, err
	}
	if err := waitResident(ctx, cri, id, mib); err != nil {
		return s, err
	}
	tgt, err := task.ParseTarget("app="+strings.Split(base, "/")[0]+"/bench/snap/"+name+":mem", true)
	if err != nil {
		return s, err
	}
	dir := filepath.Join(work, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return s, err
	}
	defer os.RemoveAll(dir)
	cm := committer.New(cri.Client, committer.Config{
		// The bench's registry is its own, on loopback.
		Params: &task.Params{PodName: name, PodNamespace: "bench", PodUID: name + "-uid", RunID: "run-" + name, Targets: []task.Target{tgt}, Insecure: true,
			MaxPause: time.Minute, KeepLocal: true, KeepLocalMaxBytes: 64 << 30, AllowAnonymousPull: true},
		CheckpointDir: dir, LayerDir: dir, Log: io.Discard,
	})
	start, ownCPU, ctrdCPU := time.Now(), proc.OwnCPUSeconds(), proc.CPUSeconds(cri.Pid())
	res, err := cm.Checkpoint(ctx)
	if err != nil {
		return s, err
	}
	s.checkpoint, s.freeze = time.Since(start), res.PauseWindow
	s.committerCPU = seconds(proc.OwnCPUSeconds() - ownCPU)
	s.containerdCPU = seconds(proc.CPUSeconds(cri.Pid()) - ctrdCPU)
	s.archiveBytes = res.Images[0].DiffSize
	start, ctrdCPU = time.Now(), proc.CPUSeconds(cri.Pid())
	pushed, _, err := cm.Push(ctx)
	if err != nil {
		return s, err
	}
	s.push = time.Since(start)
	s.total = s.checkpoint + s.push
	s.pushContainerdCPU = seconds(proc.CPUSeconds(cri.Pid()) - ctrdCPU)
	ref := pushed[0].Target.Repository() + "@" + pushed[0].Digest
	layer, err := pushedLayer(ref)
	if err != nil {
		return s, err
	}
	s.imageBytes = layer.Size
	if s.restoreLocal, err = restore(ctx, cri, name+"-local", ref, mib); err != nil {
		return s, fmt.Errorf("restore kept on the node: %w", err)
	}
	if err := forget(ctx, cri, pushed[0].Target.Repository()); err != nil {
		return s, err
	}
	if _, err := cri.Client.ContentStore().Info(cri.Ctx(ctx), digest.Digest(layer.Digest.String())); !errdefs.IsNotFound(err) {
		return s, fmt.Errorf("the node still holds the checkpoint's layer (%v): the restore would not pull it", err)
	}
	if s.restorePulled, err = restore(ctx, cri, name+"-pulled", ref, mib); err != nil {
		return s, fmt.Errorf("restore pulled: %w", err)
	}
	return s, forget(ctx, cri, pushed[0].Target.Repository())
}

// pushedLayer returns the descriptor of the one layer of the checkpoint
// image ref in the registry.
func pushedLayer(ref string) (v1.Descriptor, error) {
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		return v1.Descriptor{}, err
	}
	img, err := remote.Image(r)
	if err != nil {
		return v1.Descriptor{}, err
	}
	m, err := img.Manifest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	if len(m.Layers) != 1 {
		return v1.Descriptor{}, fmt.Errorf("%s has %d layers, want 1", ref, len(m.Layers))
	}
	return m.Layers[0], nil
}

// restore creates a pod whose container's image is the checkpoint ref and
// times it to the first successful exec, checking the process holds its
// memory again.
func restore(ctx context.Context, cri *ctrharness.Containerd, name, ref string, mib int) (time.Duration, error) {
	start := time.Now()
	pod, err := cri.RunPod(ctx, name, "bench", name+"-uid")
	if err != nil {
		return 0, err
	}
	defer cri.RemovePod(ctx, pod)
	id, err := cri.StartContainer(ctx, pod, "app", ref)
	if err != nil {
		return 0, err
	}
	if _, err := cri.ExecSync(ctx, id, "true"); err != nil {
		return 0, err
	}
	took := time.Since(start)
	return took, waitResident(ctx, cri, id, mib)
}

// waitResident waits until the hog has filled its memory and holds at least mib MiB resident; after a restore
// it does at once.
func waitResident(ctx context.Context, cri *ctrharness.Containerd, id string, mib int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, err := cri.ExecSync(ctx, id, "sh", "-c", "cat /tmp/hog-ready /proc/$(busybox pidof hog)/status")
		if err == nil && strings.HasPrefix(out, strconv.Itoa(mib)) && residentKiB(out) >= int64(mib)<<10 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the hog does not hold %d MiB resident: %v\n%s", mib, err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// residentKiB reads VmRSS from a /proc/<pid>/status.
func residentKiB(status string) int64 {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// forget removes every image of repository from the node, under every
// name (the CRI names an image by its ID too), and their content with
// them, as its garbage collection does, so that the next restore pulls.
func forget(ctx context.Context, cri *ctrharness.Containerd, repository string) error {
	cctx := cri.Ctx(ctx)
	is := cri.Client.ImageService()
	imgs, err := is.List(cctx)
	if err != nil {
		return err
	}
	manifests := map[digest.Digest]bool{}
	for _, img := range imgs {
		if strings.HasPrefix(img.Name, repository+":") || strings.HasPrefix(img.Name, repository+"@") {
			manifests[img.Target.Digest] = true
		}
	}
	for _, img := range imgs {
		if manifests[img.Target.Digest] {
			if err := is.Delete(cctx, img.Name, images.SynchronousDelete()); err != nil {
				return err
			}
		}
	}
	return nil
}

// pushImages pushes busybox with the hog as base, and busybox sleeping as
// the pod sandbox image.
func pushImages(hog, base, sandboxImage string) error {
	bb, err := ctrharness.BusyboxImage(true)
	if err != nil {
		return err
	}
	bin, err := os.ReadFile(hog)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/hog", Mode: 0o755, Size: int64(len(bin)), ModTime: time.Unix(1700000000, 0)}); err != nil {
		return err
	}
	if _, err := tw.Write(bin); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(bb, layer)
	if err != nil {
		return err
	}
	if err := ctrharness.PushImage(base, img); err != nil {
		return err
	}
	cf, err := bb.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.Config.Cmd = []string{"sleep", "2147483647"}
	sleeping, err := mutate.ConfigFile(bb, cf)
	if err != nil {
		return err
	}
	return ctrharness.PushImage(sandboxImage, sleeping)
}

// seconds is s seconds as a Duration.
func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// median takes the median of each figure on its own.
func median(ss []sample) sample {
	d := func(f func(sample) time.Duration) time.Duration { return ctrharness.MedianOf(ss, f) }
	n := func(f func(sample) int64) int64 { return ctrharness.MedianOf(ss, f) }
	return sample{
		freeze:            d(func(s sample) time.Duration { return s.freeze }),
		checkpoint:        d(func(s sample) time.Duration { return s.checkpoint }),
		committerCPU:      d(func(s sample) time.Duration { return s.committerCPU }),
		containerdCPU:     d(func(s sample) time.Duration { return s.containerdCPU }),
		push:              d(func(s sample) time.Duration { return s.push }),
		total:             d(func(s sample) time.Duration { return s.total }),
		pushContainerdCPU: d(func(s sample) time.Duration { return s.pushContainerdCPU }),
		imageBytes:        n(func(s sample) int64 { return s.imageBytes }),
		archiveBytes:      n(func(s sample) int64 { return s.archiveBytes }),
		restoreLocal:      d(func(s sample) time.Duration { return s.restoreLocal }),
		restorePulled:     d(func(s sample) time.Duration { return s.restorePulled }),
	}
}
