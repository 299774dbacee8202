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

// Package ctrharness starts a private containerd for integration tests and
// benchmarks, and builds small busybox images for it. It needs root.
package ctrharness

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	runcoptions "github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/opensandbox-group/sandbox-snapshot-operator/test/cluster/nodehost"
)

// Namespace is the containerd namespace used, the CRI one.
const Namespace = "k8s.io"

// Containerd is a private containerd daemon.
type Containerd struct {
	Bin      string
	Dir      string
	Address  string
	RuncRoot string
	FifoDir  string
	// CgroupParent is the private cgroup parent of every container.
	CgroupParent string
	Client       *client.Client
	Version      string
	cmd          *exec.Cmd
	logFile      *os.File
}

// Bin returns $CONTAINERD_BIN or /usr/bin/containerd.
func Bin() string {
	if b := os.Getenv("CONTAINERD_BIN"); b != "" {
		return b
	}
	return "/usr/bin/containerd"
}

// Start launches containerd with a version-2 config whose root, state,
// sockets and plugin directories all live under a new temp directory, with
// its CRI plugin off.
func Start(bin string) (*Containerd, error) {
	return start(bin, nil, nil)
}

// start launches containerd; cri, when set, turns the CRI plugin on with
// the configuration it returns for the daemon's directory, and path is put
// on the daemon's PATH (after the shim's directory).
func start(bin string, cri func(dir, version string) string, path []string) (*Containerd, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("containerd needs root")
	}
	dir, err := os.MkdirTemp("", "committer-ctrd-")
	if err != nil {
		return nil, err
	}
	c := &Containerd{
		Bin:          bin,
		Dir:          dir,
		Address:      filepath.Join(dir, "c.sock"),
		RuncRoot:     filepath.Join(dir, "runc"),
		FifoDir:      filepath.Join(dir, "fifo"),
		CgroupParent: "/" + filepath.Base(dir),
	}
	for _, d := range []string{c.RuncRoot, c.FifoDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	disabled := `"io.containerd.nri.v1.nri", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"`
	if cri == nil {
		disabled = `"io.containerd.grpc.v1.cri", "io.containerd.cri.v1.images", "io.containerd.cri.v1.runtime", ` + disabled
	}
	cfg := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = [%s]

[grpc]
  address = %q

[ttrpc]
  address = %q

[debug]
  level = "info"

[plugins."io.containerd.internal.v1.opt"]
  path = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), disabled, c.Address, c.Address+".ttrpc", filepath.Join(dir, "opt"))
	if out, err := exec.Command(bin, "--version").CombinedOutput(); err == nil {
		c.Version = strings.TrimSpace(string(out))
	}
	if cri != nil {
		cfg += cri(dir, c.Version)
	}
	cfgPath := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	c.logFile, err = os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		return nil, err
	}
	c.cmd = exec.Command(bin, "--config", cfgPath)
	c.cmd.Stdout, c.cmd.Stderr = c.logFile, c.logFile
	// containerd finds its shim on PATH first: put the shim built with this
	// containerd ahead of the system one.
	c.cmd.Env = append(os.Environ(), "PATH="+strings.Join(append(append([]string{filepath.Dir(bin)}, path...), os.Getenv("PATH")), ":"))
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// Shim sockets (/run/containerd/s/<hash of address>) are the only state
	// outside dir: Stop kills the shims and removes their sockets, never the
	// folder, which every containerd on the machine shares.
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(c.Address); err == nil {
			cl, err := client.New(c.Address, client.WithDefaultNamespace(Namespace), client.WithTimeout(5*time.Second))
			if err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, verr := cl.Version(ctx)
				cancel()
				if verr == nil {
					c.Client = cl
					return c, nil
				}
				cl.Close()
			}
		}
		if time.Now().After(deadline) {
			c.Stop()
			return nil, fmt.Errorf("containerd did not come up; log: %s", c.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Log returns the tail of the daemon log.
func (c *Containerd) Log() string {
	b, _ := os.ReadFile(filepath.Join(c.Dir, "containerd.log"))
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return string(b)
}

// Pid returns the containerd process's pid.
func (c *Containerd) Pid() int { return c.cmd.Process.Pid }

// Ctx returns a context in the CRI namespace.
func (c *Containerd) Ctx(ctx context.Context) context.Context {
	return namespaces.WithNamespace(ctx, Namespace)
}

// Stop kills every task, removes containers, stops the daemon and its shims,
// unmounts what is left under Dir, removes the private cgroups and Dir.
func (c *Containerd) Stop() error {
	var errs []error
	if c.Client != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		nss, _ := c.Client.NamespaceService().List(ctx)
		for _, ns := range nss {
			nctx := namespaces.WithNamespace(ctx, ns)
			ctrs, _ := c.Client.Containers(nctx)
			for _, ctr := range ctrs {
				if err := c.DeleteContainer(nctx, ctr); err != nil {
					errs = append(errs, err)
				}
			}
		}
		cancel()
		c.Client.Close()
	}
	if c.cmd != nil && c.cmd.Process != nil {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- c.cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = c.cmd.Process.Kill()
			<-done
		}
	}
	killShims(c.Address)
	unmountUnder(c.Dir)
	removeCgroups(c.CgroupParent)
	if c.logFile != nil {
		c.logFile.Close()
	}
	if err := os.RemoveAll(c.Dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ShimBinaries returns the executables of the shims serving this daemon.
func (c *Containerd) ShimBinaries() []string {
	seen := map[string]bool{}
	var out []string
	for _, sh := range shims(c.Address) {
		if exe, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(sh.pid), "exe")); err == nil && !seen[exe] {
			seen[exe] = true
			out = append(out, exe)
		}
	}
	return out
}

// shim is a shim process of this daemon, and the socket it listens on when
// its command line names it.
type shim struct {
	pid    int
	socket string
}

// shims lists the shim processes started for this daemon (their command
// line names our private address).
func shims(address string) []shim {
	var out []shim
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if sh, ok := shimOf(address, pid, strings.Split(string(cmdline), "\x00")); ok {
			out = append(out, sh)
		}
	}
	return out
}

// shimOf tells whether args are those of a shim of the containerd at
// address, and which socket it listens on, as nodehost reads them.
func shimOf(address string, pid int, args []string) (shim, bool) {
	ns, id, ok := nodehost.ShimOf(address, args)
	if !ok {
		return shim{}, false
	}
	sh := shim{pid: pid}
	if ns != "" && id != "" {
		sh.socket = nodehost.ShimSocket(address, ns, id)
	}
	return sh, true
}

// killShims kills, by PID, the shim processes started for this daemon, and
// removes the sockets they leave in /run/containerd/s.
func killShims(address string) {
	for _, sh := range shims(address) {
		_ = syscall.Kill(sh.pid, syscall.SIGKILL)
		if sh.socket != "" {
			_ = os.Remove(sh.socket)
		}
	}
}

func unmountUnder(dir string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var mps []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			mps = append(mps, fields[4])
		}
	}
	f.Close()
	sort.Slice(mps, func(i, j int) bool { return len(mps[i]) > len(mps[j]) })
	for _, m := range mps {
		_ = syscall.Unmount(m, syscall.MNT_DETACH)
	}
}

// removeCgroups removes the (empty) private cgroup parent in every hierarchy.
func removeCgroups(parent string) {
	if parent == "" || parent == "/" {
		return
	}
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	roots = append(roots, "/sys/fs/cgroup")
	for _, r := range roots {
		p := filepath.Join(r, parent)
		subs, _ := os.ReadDir(p)
		for _, s := range subs {
			if s.IsDir() {
				_ = syscall.Rmdir(filepath.Join(p, s.Name()))
			}
		}
		_ = syscall.Rmdir(p)
	}
}

// DeleteContainer kills the task (thawing it first if paused) and removes the
// container with its snapshot.
func (c *Containerd) DeleteContainer(ctx context.Context, ctr client.Container) error {
	if task, err := ctr.Task(ctx, nil); err == nil {
		if st, err := task.Status(ctx); err == nil && st.Status == client.Paused {
			_ = task.Resume(ctx)
		}
		if ch, err := task.Wait(ctx); err == nil {
			if err := task.Kill(ctx, syscall.SIGKILL); err == nil || errdefs.IsNotFound(err) {
				select {
				case <-ch:
				case <-time.After(10 * time.Second):
				}
			}
		}
		if _, err := task.Delete(ctx, client.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("deleting task %s: %w", ctr.ID(), err)
		}
	}
	if err := ctr.Delete(ctx, client.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("deleting container %s: %w", ctr.ID(), err)
	}
	return nil
}

// PodContainer describes a CRI-labelled container to run.
type PodContainer struct {
	ID           string
	Pod          string
	PodNamespace string
	// PodUID is the io.kubernetes.pod.uid label; left out when empty.
	PodUID string
	Name   string
	Image  string
	Args   []string
	// Sandbox marks it as a pod sandbox container (kind=sandbox).
	Sandbox bool
}

// Run creates and starts a container with CRI labels. It returns the
// container and its running task.
func (c *Containerd) Run(ctx context.Context, pc PodContainer, stdout io.Writer) (client.Container, client.Task, error) {
	var creator cio.Creator = cio.NullIO
	if stdout != nil {
		creator = cio.NewCreator(cio.WithStreams(nil, stdout, stdout), cio.WithFIFODir(c.FifoDir))
	}
	return c.run(ctx, pc, creator)
}

func (c *Containerd) run(ctx context.Context, pc PodContainer, creator cio.Creator) (client.Container, client.Task, error) {
	img, err := c.Client.GetImage(ctx, pc.Image)
	if err != nil {
		return nil, nil, err
	}
	kind := "container"
	if pc.Sandbox {
		kind = "sandbox"
	}
	labels := map[string]string{
		"io.kubernetes.pod.name":      pc.Pod,
		"io.kubernetes.pod.namespace": pc.PodNamespace,
		"io.cri-containerd.kind":      kind,
	}
	if !pc.Sandbox {
		labels["io.kubernetes.container.name"] = pc.Name
	}
	if pc.PodUID != "" {
		labels["io.kubernetes.pod.uid"] = pc.PodUID
	}
	args := pc.Args
	if len(args) == 0 {
		args = []string{"sleep", "3600"}
	}
	ctr, err := c.Client.NewContainer(ctx, pc.ID,
		client.WithImage(img),
		client.WithNewSnapshot(pc.ID, img), // CRI and nerdctl use the container ID as snapshot key
		client.WithContainerLabels(labels),
		client.WithRuntime("io.containerd.runc.v2", &runcoptions.Options{Root: c.RuncRoot}),
		client.WithNewSpec(oci.WithImageConfig(img), oci.WithProcessArgs(args...),
			oci.WithCgroup(c.CgroupParent+"/"+pc.ID), oci.WithHostname(pc.Name)),
	)
	if err != nil {
		return nil, nil, err
	}
	task, err := ctr.NewTask(ctx, creator)
	if err != nil {
		_ = ctr.Delete(ctx, client.WithSnapshotCleanup)
		return nil, nil, err
	}
	if err := task.Start(ctx); err != nil {
		_, _ = task.Delete(ctx, client.WithProcessKill)
		_ = ctr.Delete(ctx, client.WithSnapshotCleanup)
		return nil, nil, err
	}
	return ctr, task, nil
}

// RunToCompletion runs a one-shot container and returns its exit code and
// output (stdout and stderr, written by the shim straight to a file).
func (c *Containerd) RunToCompletion(ctx context.Context, id, image string, args ...string) (uint32, string, error) {
	logPath := filepath.Join(c.Dir, "out-"+id+".log")
	defer os.Remove(logPath)
	ctr, task, err := c.run(ctx, PodContainer{ID: id, Pod: "oneshot", PodNamespace: "test", Name: "oneshot", Image: image, Args: args}, cio.LogFile(logPath))
	if err != nil {
		return 0, "", err
	}
	defer c.DeleteContainer(ctx, ctr)
	ch, err := task.Wait(ctx)
	if err != nil {
		return 0, "", err
	}
	var st client.ExitStatus
	select {
	case st = <-ch:
	case <-time.After(60 * time.Second):
		return 0, "", fmt.Errorf("container %s did not exit", id)
	}
	_, _ = task.Delete(ctx)
	out, err := os.ReadFile(logPath)
	return st.ExitCode(), string(out), err
}

// Pull pulls and unpacks an image from a plain-HTTP registry.
func (c *Containerd) Pull(ctx context.Context, ref string) (client.Image, error) {
	resolver := docker.NewResolver(docker.ResolverOptions{
		Hosts: docker.ConfigureDefaultRegistries(docker.WithPlainHTTP(docker.MatchAllHosts)),
	})
	return c.Client.Pull(ctx, ref, client.WithPullUnpack, client.WithResolver(resolver))
}

// Registry is an in-process OCI registry on 127.0.0.1.
type Registry struct {
	*httptest.Server
	// Host is "127.0.0.1:port".
	Host string
}

// NewRegistry starts github.com/google/go-containerregistry/pkg/registry.
func NewRegistry() *Registry {
	return serveRegistry(func(h http.Handler) http.Handler { return h })
}

// serveRegistry starts go-containerregistry's registry, logging nothing,
// behind the handler wrap makes of it.
func serveRegistry(wrap func(http.Handler) http.Handler) *Registry {
	s := httptest.NewServer(wrap(registry.New(registry.Logger(log.New(io.Discard, "", 0)))))
	return &Registry{Server: s, Host: strings.TrimPrefix(s.URL, "http://")}
}

// BusyboxImage builds a one-layer image from /bin/busybox with applet links.
// oci selects OCI media types instead of Docker schema 2.
func BusyboxImage(oci bool) (v1.Image, error) {
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Unix(1700000000, 0)
	for _, d := range []string{"bin/", "tmp/", "etc/", "proc/", "sys/", "dev/", "data/"} {
		mode := int64(0o755)
		if d == "tmp/" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: mode, ModTime: now}); err != nil {
			return nil, err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(bb)), ModTime: now}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bb); err != nil {
		return nil, err
	}
	for _, a := range []string{"sh", "sleep", "cat", "ls", "test", "echo", "dd", "sync", "rm", "mkdir", "true", "sha256sum", "wc", "head"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + a, Linkname: "busybox", Mode: 0o777, ModTime: now}); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return shellImage(buf.Bytes(), oci, v1.History{CreatedBy: "busybox from the test host", Created: v1.Time{Time: now}}, []string{"PATH=/bin"})
}

// RestoreBaseImage builds what a platform serves as config-snapshot's
// memory-restore-base: an image of one empty layer, with a command and the
// node's platform, that holds nothing of any sandbox's.
func RestoreBaseImage() (v1.Image, error) {
	var buf bytes.Buffer
	if err := tar.NewWriter(&buf).Close(); err != nil {
		return nil, err
	}
	return shellImage(buf.Bytes(), true, v1.History{}, nil)
}

// shellImage builds a linux/amd64 image whose one layer is the tar
// layerBytes, added with history h, and whose command is /bin/sh with env;
// oci selects OCI media types instead of Docker schema 2.
func shellImage(layerBytes []byte, oci bool, h v1.History, env []string) (v1.Image, error) {
	mt := types.DockerLayer
	base := empty.Image
	if oci {
		mt = types.OCILayer
		base = mutate.MediaType(base, types.OCIManifestSchema1)
		base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerBytes)), nil
	}, tarball.WithMediaType(mt))
	if err != nil {
		return nil, err
	}
	img, err := mutate.Append(base, mutate.Addendum{Layer: layer, History: h})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Config.Env = env
	cf.Config.Cmd = []string{"/bin/sh"}
	return mutate.ConfigFile(img, cf)
}

// PushImage pushes img to ref on a plain-HTTP registry.
func PushImage(ref string, img v1.Image) error {
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		return err
	}
	return remote.Write(r, img)
}

// NewRegistryWithAuth starts a registry that requires HTTP basic auth.
func NewRegistryWithAuth(user, pass string) *Registry {
	return serveRegistry(func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			u, p, ok := r.BasicAuth()
			if !ok || u != user || p != pass {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
}

// PushImageAuth pushes img to ref with basic credentials.
func PushImageAuth(ref string, img v1.Image, user, pass string) error {
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		return err
	}
	return remote.Write(r, img, remote.WithAuth(&authn.Basic{Username: user, Password: pass}))
}

// PullAuth pulls and unpacks an image from a plain-HTTP registry with basic credentials.
func (c *Containerd) PullAuth(ctx context.Context, ref, user, pass string) (client.Image, error) {
	authz := docker.NewDockerAuthorizer(docker.WithAuthCreds(func(string) (string, string, error) { return user, pass, nil }))
	resolver := docker.NewResolver(docker.ResolverOptions{
		Hosts: docker.ConfigureDefaultRegistries(docker.WithPlainHTTP(docker.MatchAllHosts), docker.WithAuthorizer(authz)),
	})
	return c.Client.Pull(ctx, ref, client.WithPullUnpack, client.WithResolver(resolver))
}
