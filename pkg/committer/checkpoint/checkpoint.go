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

// Package checkpoint snapshots frozen containers' memory through containerd
// and CRIU, and writes the files and archives containerd's CRI restores from.
package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	crmetadata "github.com/checkpoint-restore/checkpointctl/lib"
	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/client"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/diskbudget"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/committer/freeze"
)

// ErrUnsupported reports a container that cannot be checkpointed or restored
// (containerd, runtime, CRIU, unpullable base). Nothing is left frozen.
var ErrUnsupported = errors.New("MemorySnapshotUnsupported")

// Dumper checkpoints the containers of one pod through containerd.
type Dumper struct {
	client *client.Client
	pod    string
	log    *log.Logger
}

// New returns a Dumper of pod's containers in c.
func New(c *client.Client, pod string, log *log.Logger) *Dumper {
	return &Dumper{client: c, pod: pod, log: log}
}

// runcRuntime is the only runtime whose checkpoint options this step sets.
const runcRuntime = "io.containerd.runc.v2"

// Checkpointable fails with ErrUnsupported unless every runtime is runc and
// containerd restores on pod creation (2.1 to 2.3; 2.4+ only via RestorePod).
func (d *Dumper) Checkpointable(ctx context.Context, live []*freeze.Container) error {
	v, err := d.client.Version(ctx)
	if err != nil {
		return fmt.Errorf("pod %s: containerd's version: %w", d.pod, err)
	}
	major, minor, ok := majorMinor(v.Version)
	switch {
	case !ok || major < 2 || major == 2 && minor < 1:
		return fmt.Errorf("pod %s: %w: the node's containerd is %s; restoring a memory snapshot needs containerd 2.1 or later (with CRIU 4 on its PATH)",
			d.pod, ErrUnsupported, v.Version)
	case major > 2 || minor >= 4:
		return fmt.Errorf("pod %s: %w: the node's containerd is %s, which restores a checkpoint only through the kubelet's RestorePod, not when a pod is created from its image as OpenSandbox's resume does; memory snapshots need containerd 2.1 to 2.3",
			d.pod, ErrUnsupported, v.Version)
	case minor >= 2:
		off, err := d.restoreViaCreateOff(ctx)
		if err != nil {
			d.log.Printf("pod %s: not checked that containerd %s restores through CreateContainer: %v", d.pod, v.Version, err)
		} else if off {
			return fmt.Errorf("pod %s: %w: the node's containerd %s restores a checkpoint when a pod is created from its image only with enable_experimental_restore_via_create = true in its CRI configuration",
				d.pod, ErrUnsupported, v.Version)
		}
	}
	for _, l := range live {
		if l.Info.Runtime.Name != runcRuntime {
			return fmt.Errorf("pod %s %s: %w: its runtime is %s; memory snapshots need %s", d.pod, l, ErrUnsupported, l.Info.Runtime.Name, runcRuntime)
		}
	}
	return nil
}

// restoreViaCreateOff reports whether the CRI config turns off restore via
// CreateContainer (default from 2.2.7 and 2.3.4; always on before).
func (d *Dumper) restoreViaCreateOff(ctx context.Context) (bool, error) {
	rs := runtimeapi.NewRuntimeServiceClient(d.client.Conn().(*grpc.ClientConn))
	r, err := rs.Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		return false, fmt.Errorf("the CRI's status: %w", err)
	}
	var cfg struct {
		RestoreViaCreate *bool `json:"enableExperimentalRestoreViaCreate"`
	}
	if err := json.Unmarshal([]byte(r.GetInfo()["config"]), &cfg); err != nil {
		return false, fmt.Errorf("the CRI's configuration: %w", err)
	}
	return cfg.RestoreViaCreate != nil && !*cfg.RestoreViaCreate, nil
}

var versionRE = regexp.MustCompile(`^v?(\d+)\.(\d+)`)

// majorMinor parses a containerd version such as "v2.1.3" or "1.6.20~ds1".
func majorMinor(v string) (major, minor int, ok bool) {
	m := versionRE.FindStringSubmatch(v)
	if m == nil {
		return 0, 0, false
	}
	major, _ = strconv.Atoi(m[1])
	minor, _ = strconv.Atoi(m[2])
	return major, minor, true
}

// Dump has CRIU dump frozen l into dir as the CRI does; l keeps running.
func (d *Dumper) Dump(ctx context.Context, l *freeze.Container, dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("pod %s %s: removing an earlier attempt's checkpoint: %w", d.pod, l, err)
	}
	images := filepath.Join(dir, crmetadata.CheckpointDirectory)
	if err := os.MkdirAll(images, 0o700); err != nil {
		return fmt.Errorf("pod %s %s: %w", d.pod, l, err)
	}
	start := time.Now()
	_, err := l.Task.Checkpoint(ctx, func(info *client.CheckpointTaskInfo) error {
		info.Options = &options.CheckpointOptions{ImagePath: images, WorkPath: dir}
		return nil
	})
	if err != nil {
		if full, free := dumpFull(dir); full {
			return fmt.Errorf("pod %s %s: %w: checkpoint-dir %s filled up while CRIU dumped (%s free): %v", d.pod, l, diskbudget.ErrNoRoom, filepath.Dir(dir), diskbudget.Size(free), err)
		}
		return d.dumpError(l, err)
	}
	d.log.Printf("pod %s %s: CRIU dumped it in %s", d.pod, l, time.Since(start).Round(time.Millisecond))
	return nil
}

// dumpError wraps ErrUnsupported when err names CRIU: no CRIU, or a refusal.
func (d *Dumper) dumpError(l *freeze.Container, err error) error {
	if strings.Contains(strings.ToLower(err.Error()), "criu") {
		return fmt.Errorf("pod %s %s: %w: %v", d.pod, l, ErrUnsupported, err)
	}
	return fmt.Errorf("pod %s %s: checkpointing: %w", d.pod, l, err)
}

// WriteDumps writes, as CheckpointContainer does, spec.dump, config.dump
// (restore base restoreName pinned as restoreRef) and status.dump (st).
func WriteDumps(l *freeze.Container, st *runtimeapi.ContainerStatus, dir string, at time.Time, restoreName, restoreRef string) error {
	if l.Info.Spec == nil {
		return errors.New("the container has no spec")
	}
	status, err := json.Marshal(st)
	if err != nil {
		return err
	}
	config, err := json.Marshal(&crmetadata.ContainerConfig{
		ID:              l.Info.ID,
		Name:            st.GetMetadata().GetName(),
		RootfsImageName: restoreName,
		RootfsImageRef:  restoreRef,
		OCIRuntime:      l.Info.Runtime.Name,
		RootfsImage:     st.GetImage().GetImage(),
		CheckpointedAt:  at,
		CreatedTime:     l.Info.CreatedAt,
	})
	if err != nil {
		return err
	}
	for name, b := range map[string][]byte{
		crmetadata.SpecDumpFile:   l.Info.Spec.GetValue(),
		crmetadata.ConfigDumpFile: config,
		crmetadata.StatusDumpFile: status,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// Status returns the CRI's status of container l.
func (d *Dumper) Status(ctx context.Context, l *freeze.Container) (*runtimeapi.ContainerStatus, error) {
	rs := runtimeapi.NewRuntimeServiceClient(d.client.Conn().(*grpc.ClientConn))
	r, err := rs.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: l.Info.ID})
	if err != nil {
		return nil, fmt.Errorf("the container's CRI status: %w", err)
	}
	return r.GetStatus(), nil
}

// fullBelow is more than CRIU writes at once: less free means a full disk.
const fullBelow = 16 << 20

// dumpFull reports whether dir's filesystem filled up, and its free bytes.
func dumpFull(dir string) (bool, uint64) {
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return false, 0
	}
	free := fs.Bfree * uint64(fs.Bsize)
	return free < fullBelow, free
}
