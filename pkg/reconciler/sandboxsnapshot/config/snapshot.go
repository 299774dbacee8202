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

// Package config holds the operator's settings, read from the config-snapshot
// ConfigMap in the system namespace.
package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
)

// SnapshotConfigName is the name of the ConfigMap holding Snapshot.
const SnapshotConfigName = "config-snapshot"

// Keys of the config-snapshot ConfigMap.
const (
	RegistryKey         = "registry"
	PushSecretKey       = "push-secret"
	InsecureRegistryKey = "insecure-registry"
	CommitTimeoutKey    = "commit-timeout"
	ContainerdSocketKey = "containerd-socket"
	TaskNameKey         = "task-name"
	TaskBundleKey       = "task-bundle"
	DefaultClassKey     = "default-class"
)

// Defaults of the config-snapshot ConfigMap.
const (
	DefaultCommitTimeout    = 10 * time.Minute
	DefaultContainerdSocket = "/var/run/containerd/containerd.sock"
)

// ErrRegistryNotConfigured is Snapshot.Err when no registry is set.
var ErrRegistryNotConfigured = errors.New("the snapshot registry is not configured: set key \"" + RegistryKey + "\" in ConfigMap " + SnapshotConfigName)

// Snapshot is the typed form of config-snapshot.
type Snapshot struct {
	// Registry is the repository prefix images are pushed under, e.g.
	// "registry.example.com/sandbox-snapshots".
	Registry string
	// PushSecret names a kubernetes.io/dockerconfigjson Secret, in the
	// TaskRun namespace, bound as the Task's dockerconfig workspace.
	PushSecret string
	// InsecureRegistry allows plain HTTP to the registry.
	InsecureRegistry bool
	// CommitTimeout bounds each commit TaskRun.
	CommitTimeout time.Duration
	// ContainerdSocket is the containerd socket's path on the nodes.
	ContainerdSocket string
	// TaskName names the commit Task: in the TaskRun namespace, or in
	// TaskBundle when that is set.
	TaskName string
	// TaskBundle is a Tekton bundle holding the commit Task, pinned by
	// digest (<repository>@sha256:<hex>), or empty for the namespaced Task.
	TaskBundle string
	// DefaultClass is the class of snapshots without the class annotation.
	DefaultClass string

	// Err is why the settings cannot be used, or nil. A bad ConfigMap never
	// stops the controller: snapshots fail with this error instead.
	Err error
}

// NewSnapshotFromConfigMap parses config-snapshot. It never fails: problems
// are collected in Snapshot.Err, so the controller keeps running and reports
// them on the snapshots they affect.
func NewSnapshotFromConfigMap(cm *corev1.ConfigMap) (*Snapshot, error) {
	s := &Snapshot{
		Registry:         strings.TrimSuffix(strings.TrimSpace(cm.Data[RegistryKey]), "/"),
		PushSecret:       strings.TrimSpace(cm.Data[PushSecretKey]),
		CommitTimeout:    DefaultCommitTimeout,
		ContainerdSocket: DefaultContainerdSocket,
		TaskName:         task.Name,
		DefaultClass:     sandbox.TektonClass,
	}
	var errs []error
	if v, ok := cm.Data[InsecureRegistryKey]; ok {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			errs = append(errs, fmt.Errorf("key %q: %q is not a boolean", InsecureRegistryKey, v))
		}
		s.InsecureRegistry = b
	}
	if v, ok := cm.Data[CommitTimeoutKey]; ok {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("key %q: %q is not a duration such as 10m", CommitTimeoutKey, v))
		case d <= 0:
			errs = append(errs, fmt.Errorf("key %q: %q must be positive", CommitTimeoutKey, v))
		default:
			s.CommitTimeout = d
		}
	}
	if v := strings.TrimSpace(cm.Data[ContainerdSocketKey]); v != "" {
		if !strings.HasPrefix(v, "/") {
			errs = append(errs, fmt.Errorf("key %q: %q is not an absolute path", ContainerdSocketKey, v))
		}
		s.ContainerdSocket = v
	}
	if v := strings.TrimSpace(cm.Data[TaskNameKey]); v != "" {
		s.TaskName = v
	}
	if v := strings.TrimSpace(cm.Data[TaskBundleKey]); v != "" {
		// Only a digest pins the Task: a tag could be pushed again under it.
		if _, err := name.NewDigest(v, name.StrictValidation); err != nil {
			errs = append(errs, fmt.Errorf("key %q: %q is not a bundle pinned by digest, <registry>/<repository>@sha256:<hex> (tkn bundle push prints it): %w", TaskBundleKey, v, err))
		}
		s.TaskBundle = v
	}
	if v := strings.TrimSpace(cm.Data[DefaultClassKey]); v != "" {
		s.DefaultClass = v
	}
	if s.Registry == "" {
		errs = append(errs, ErrRegistryNotConfigured)
	}
	if len(errs) > 0 {
		s.Err = fmt.Errorf("ConfigMap %s: %w", SnapshotConfigName, errors.Join(errs...))
	}
	return s, nil
}

// Handles reports whether a snapshot with the given annotations belongs to
// this operator rather than to another controller, such as OpenSandbox's own.
func (s *Snapshot) Handles(annotations map[string]string) bool {
	class, ok := annotations[sandbox.ClassAnnotation]
	if !ok {
		class = s.DefaultClass
	}
	return class == sandbox.TektonClass
}
