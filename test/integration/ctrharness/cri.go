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

package ctrharness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// CRIOptions configures StartCRI.
type CRIOptions struct {
	// SandboxImage is the pod sandbox image; its command must run until killed.
	SandboxImage string
	// Registry is a plain-HTTP registry host the CRI plugin pulls from.
	Registry string
	// Path lists directories put on containerd's PATH (CRIU's, for one).
	Path []string
	// NoRestoreViaCreate leaves restore through CreateContainer off on the
	// containerds that have the setting (restoreViaCreate).
	NoRestoreViaCreate bool
}

// StartCRI launches containerd as Start does, with its CRI plugin on, as a
// kubelet's node runs it: pod sandboxes on the host network only, runc's
// state and the pods' cgroups private to the daemon.
func StartCRI(bin string, o CRIOptions) (*Containerd, error) {
	return start(bin, func(dir, version string) string {
		certs := filepath.Join(dir, "certs.d")
		hosts := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "http://"+o.Registry, "http://"+o.Registry)
		if err := os.MkdirAll(filepath.Join(certs, o.Registry), 0o700); err == nil {
			_ = os.WriteFile(filepath.Join(certs, o.Registry, "hosts.toml"), []byte(hosts), 0o600)
		}
		return fmt.Sprintf(`
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = true
  enable_selinux = false
%s  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = %q
  [plugins."io.containerd.grpc.v1.cri".cni]
    conf_dir = %q
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %q
`, o.SandboxImage, restoreViaCreate(version, !o.NoRestoreViaCreate), filepath.Join(dir, "runc"), filepath.Join(dir, "cni"), certs)
	}, o.Path)
}

// restoreViaCreate is the CRI setting with which containerd 2.2 or 2.3
// (version as `containerd --version` prints it) restores a checkpoint image
// through CreateContainer, as a kubelet asks, or not: from 2.2.7 and 2.3.4
// on they refuse it unless enable_experimental_restore_via_create is set.
func restoreViaCreate(version string, on bool) string {
	if !restoresViaCreateIfSet.MatchString(version) {
		return ""
	}
	return fmt.Sprintf("  enable_experimental_restore_via_create = %t\n", on)
}

var restoresViaCreateIfSet = regexp.MustCompile(` v2\.[23]\.`)

// Runtime returns a CRI runtime client on the daemon's socket.
func (c *Containerd) Runtime() runtimeapi.RuntimeServiceClient {
	return runtimeapi.NewRuntimeServiceClient(c.Client.Conn().(*grpc.ClientConn))
}

// Pod is a pod sandbox started through the CRI.
type Pod struct {
	ID     string
	Config *runtimeapi.PodSandboxConfig
}

// RunPod starts a pod sandbox on the host network, each of its containers
// in its own PID namespace as kubelet runs them (no shareProcessNamespace,
// nor does OpenSandbox set it). In one shared namespace, a container's
// restore could find a PID it needs taken by a process another container
// had forked since its own restore.
func (c *Containerd) RunPod(ctx context.Context, name, namespace, uid string) (*Pod, error) {
	logs := filepath.Join(c.Dir, "logs", uid)
	if err := os.MkdirAll(logs, 0o700); err != nil {
		return nil, err
	}
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: namespace, Uid: uid},
		LogDirectory: logs,
		Labels:       map[string]string{"io.kubernetes.pod.name": name, "io.kubernetes.pod.namespace": namespace, "io.kubernetes.pod.uid": uid},
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: c.CgroupParent + "/" + uid,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_CONTAINER},
			},
		},
	}
	resp, err := c.Runtime().RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		return nil, fmt.Errorf("running pod sandbox %s/%s: %w", namespace, name, err)
	}
	return &Pod{ID: resp.PodSandboxId, Config: cfg}, nil
}

// StartContainer pulls image through the CRI, then creates and starts
// container name in p running args, with the labels and annotations a
// kubelet sets. It returns the container's ID.
func (c *Containerd) StartContainer(ctx context.Context, p *Pod, name, image string, args ...string) (string, error) {
	return c.StartContainerWithAuth(ctx, p, name, image, nil, args...)
}

// StartContainerWithAuth is StartContainer pulling image with auth, as a
// kubelet does with a pod's pull secret.
func (c *Containerd) StartContainerWithAuth(ctx context.Context, p *Pod, name, image string, auth *runtimeapi.AuthConfig, args ...string) (string, error) {
	img, err := runtimeapi.NewImageServiceClient(c.Client.Conn().(*grpc.ClientConn)).PullImage(ctx, &runtimeapi.PullImageRequest{
		Image: &runtimeapi.ImageSpec{Image: image}, Auth: auth, SandboxConfig: p.Config,
	})
	if err != nil {
		return "", fmt.Errorf("pulling %s: %w", image, err)
	}
	md := p.Config.Metadata
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: img.ImageRef, UserSpecifiedImage: image},
		Args:     args,
		LogPath:  name + ".log",
		Labels: map[string]string{
			"io.kubernetes.pod.name": md.Name, "io.kubernetes.pod.namespace": md.Namespace,
			"io.kubernetes.pod.uid": md.Uid, "io.kubernetes.container.name": name,
		},
		Annotations: map[string]string{"io.kubernetes.container.restartCount": "0"},
		// The pod's namespaces, as kubelet asks for them.
		Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
			NamespaceOptions: p.Config.Linux.SecurityContext.NamespaceOptions,
		}},
	}
	created, err := c.Runtime().CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: p.ID, Config: cfg, SandboxConfig: p.Config})
	if err != nil {
		return "", fmt.Errorf("creating container %s from %s: %w", name, image, err)
	}
	if _, err := c.Runtime().StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: created.ContainerId}); err != nil {
		return "", fmt.Errorf("starting container %s from %s: %w", name, image, err)
	}
	return created.ContainerId, nil
}

// RemovePod stops and removes pod sandbox p and its containers, as kubelet
// does when a pod is deleted.
func (c *Containerd) RemovePod(ctx context.Context, p *Pod) error {
	if _, err := c.Runtime().StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.ID}); err != nil {
		return fmt.Errorf("stopping pod %s: %w", p.ID, err)
	}
	if _, err := c.Runtime().RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.ID}); err != nil {
		return fmt.Errorf("removing pod %s: %w", p.ID, err)
	}
	return nil
}

// ExecSync runs cmd in container id and returns its standard output; a
// non-zero exit is an error carrying standard error.
func (c *Containerd) ExecSync(ctx context.Context, id string, cmd ...string) (string, error) {
	resp, err := c.Runtime().ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: cmd, Timeout: 30})
	if err != nil {
		return "", err
	}
	if resp.ExitCode != 0 {
		return string(resp.Stdout), fmt.Errorf("%v exited %d: %s", cmd, resp.ExitCode, resp.Stderr)
	}
	return string(resp.Stdout), nil
}
