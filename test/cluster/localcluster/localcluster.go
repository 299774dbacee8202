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

// Package localcluster reads what test/cluster's scripts keep under _output/
// for the local cluster (test/cluster/lib.sh): the pid files of its daemons,
// cluster.env and the admin kubeconfig. It also starts and stops daemons the
// way lib.sh does, and writes ServiceAccount kubeconfigs, for the Go tools
// that run processes beside the cluster (run-controller, bench).
package localcluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Dirs are the repository and the folders of the local cluster in its _output/.
type Dirs struct {
	// Root is the repository.
	Root string
	// Cluster is _output/cluster: control plane state, kubeconfigs, pids, logs.
	Cluster string
	// PIDs holds NAME.pid for every daemon the scripts started.
	PIDs string
	// Logs holds NAME.log for every daemon the scripts started.
	Logs string
	// Node is _output/node, the node-mode state.
	Node string
}

// DirsAt returns the Dirs of the repository root.
func DirsAt(root string) Dirs {
	cluster := filepath.Join(root, "_output", "cluster")
	return Dirs{
		Root:    root,
		Cluster: cluster,
		PIDs:    filepath.Join(cluster, "pids"),
		Logs:    filepath.Join(cluster, "logs"),
		Node:    filepath.Join(root, "_output", "node"),
	}
}

// Find returns the Dirs of the repository this program was built into
// (_output/bin/NAME), or else of the one around the working directory.
func Find() (Dirs, error) {
	var starts []string
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	for _, dir := range starts {
		for ; ; dir = filepath.Dir(dir) {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				return DirsAt(dir), nil
			}
			if filepath.Dir(dir) == dir {
				break
			}
		}
	}
	return Dirs{}, fmt.Errorf("no go.mod above %v", starts)
}

// Kubeconfig is the admin kubeconfig cluster-up.sh writes.
func (d Dirs) Kubeconfig() string { return filepath.Join(d.Cluster, "kubeconfig") }

// PIDFile is where the pid of daemon name is recorded.
func (d Dirs) PIDFile(name string) string { return filepath.Join(d.PIDs, name+".pid") }

// LogFile is where daemon name logs.
func (d Dirs) LogFile(name string) string { return filepath.Join(d.Logs, name+".log") }

// PID returns the pid recorded for daemon name, 0 when none is.
func (d Dirs) PID(name string) int {
	b, err := os.ReadFile(d.PIDFile(name))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	return pid
}

// Running returns the pid of daemon name when it is recorded and alive.
func (d Dirs) Running(name string) (int, bool) {
	pid := d.PID(name)
	return pid, pid > 0 && Alive(pid)
}

// Alive reports whether process pid exists (as `kill -0` does).
func Alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// ReadEnv reads a file of KEY=VALUE lines; a later line wins.
func ReadEnv(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	env := map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		if k, v, ok := strings.Cut(s.Text(), "="); ok && !strings.HasPrefix(k, "#") {
			env[strings.TrimSpace(k)] = v
		}
	}
	return env, s.Err()
}

// Mode returns the MODE cluster-up.sh recorded: control-plane or node.
func (d Dirs) Mode() (string, error) {
	env, err := ReadEnv(filepath.Join(d.Cluster, "cluster.env"))
	if err != nil {
		return "", err
	}
	return env["MODE"], nil
}

// AdminConfig returns the client config of the admin kubeconfig.
func (d Dirs) AdminConfig() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", d.Kubeconfig())
	if err != nil {
		return nil, fmt.Errorf("no cluster (run test/cluster/cluster-up.sh): %w", err)
	}
	return cfg, nil
}

// Up returns the admin clients of the local cluster when its API server,
// started by cluster-up.sh, runs and is ready.
func (d Dirs) Up(ctx context.Context) (*rest.Config, kubernetes.Interface, error) {
	noCluster := errors.New("no cluster: run test/cluster/cluster-up.sh (make cluster-up) first")
	if _, err := d.Mode(); err != nil {
		return nil, nil, noCluster
	}
	if _, ok := d.Running("kube-apiserver"); !ok {
		return nil, nil, noCluster
	}
	cfg, err := d.AdminConfig()
	if err != nil {
		return nil, nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
		return nil, nil, fmt.Errorf("%w (/readyz: %v)", noCluster, err)
	}
	return cfg, kube, nil
}

// Logf logs a line to stderr the way hack/lib.sh's log does.
func Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
