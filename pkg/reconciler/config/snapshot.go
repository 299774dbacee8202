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
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"knative.dev/pkg/configmap"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/task"
)

// SnapshotConfigName is the name of the ConfigMap holding Snapshot.
const SnapshotConfigName = "config-snapshot"

// Keys of the config-snapshot ConfigMap.
const (
	RegistryKey         = "registry"
	PushSecretKey       = "push-secret"
	RegistrySecretKey   = "registry-secret"
	InsecureRegistryKey = "insecure-registry"
	CommitTimeoutKey    = "commit-timeout"
	ContainerdSocketKey = "containerd-socket"
	OverlayfsRootKey    = "containerd-overlayfs-root"
	TaskNameKey         = "task-name"
	TaskBundleKey       = "task-bundle"
	DefaultClassKey     = "default-class"
	PriorityClassKey    = "priority-class-name"
	MaxLayersKey        = "max-layers"
	MaxPauseKey         = task.ParamMaxPause
	KeepLocalKey        = task.ParamKeepLocal
	KeepLocalMaxSizeKey = task.ParamKeepLocalMaxSize
	// DiskReserveKey is what a commit leaves free on each node filesystem
	// it writes to.
	DiskReserveKey    = task.ParamDiskReserve
	SnapshotModeKey   = "snapshot-mode"
	MemoryFallbackKey = "memory-fallback"
	// MemoryRestoreBaseKey names the image a restore lays a self-contained
	// memory snapshot over.
	MemoryRestoreBaseKey = task.ParamMemoryRestoreBase
	// MemoryAnonymousPullKey says whether memory snapshots may go where
	// anyone may pull.
	MemoryAnonymousPullKey = task.ParamMemoryAnonymousPull
	CheckpointDirKey       = "checkpoint-dir"
	// RegistryCAConfigMapKey names the ConfigMap of the registry's CAs.
	RegistryCAConfigMapKey = "registry-ca-configmap"
	// CommitEphemeralStorageKey sets the commit step's ephemeral-storage.
	CommitEphemeralStorageKey = "commit-ephemeral-storage"

	TaskRunRetentionSucceededKey = "taskrun-retention-succeeded"
	TaskRunRetentionFailedKey    = "taskrun-retention-failed"
	ImageDeletionPolicyKey       = "image-deletion-policy"
	ImageDeletionTimeoutKey      = "image-deletion-timeout"
	ImageCheckIntervalKey        = "image-check-interval"
	ImageChecksPerMinuteKey      = "image-checks-per-minute"
)

// Defaults of the config-snapshot ConfigMap.
const (
	DefaultCommitTimeout    = 10 * time.Minute
	DefaultContainerdSocket = "/var/run/containerd/containerd.sock"
	DefaultOverlayfsRoot    = "/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs"
	DefaultPriorityClass    = "sandbox-snapshot-commit"
	DefaultMaxLayers        = task.DefaultMaxLayers
	// DefaultCommitEphemeralStorage is what a commit step may write to its
	// pod's own disk: a copy of the change and its layer, so changes up to
	// about half of it.
	DefaultCommitEphemeralStorage = "20Gi"

	DefaultTaskRunRetentionSucceeded = 5 * time.Minute
	DefaultTaskRunRetentionFailed    = 24 * time.Hour
	DefaultImageDeletionTimeout      = time.Hour
	DefaultImageCheckInterval        = time.Hour
	DefaultImageChecksPerMinute      = 60
)

// KeepTaskRuns keeps TaskRuns until their snapshot is deleted ("-1").
const KeepTaskRuns time.Duration = -1

// ImageDeletionPolicy says what deleting a snapshot does to its images.
type ImageDeletionPolicy string

const (
	// ImageDeletionRetain leaves the images in the registry.
	ImageDeletionRetain ImageDeletionPolicy = "Retain"
	// ImageDeletionDelete deletes the images' manifests from the registry.
	ImageDeletionDelete ImageDeletionPolicy = "Delete"
)

// ParseImageDeletionPolicy parses Retain or Delete.
func ParseImageDeletionPolicy(v string) (ImageDeletionPolicy, error) {
	switch p := ImageDeletionPolicy(strings.TrimSpace(v)); p {
	case ImageDeletionRetain, ImageDeletionDelete:
		return p, nil
	}
	return "", fmt.Errorf("%q is neither %q nor %q", v, ImageDeletionRetain, ImageDeletionDelete)
}

// ErrRegistryNotConfigured is Snapshot.Err when no registry is set.
var ErrRegistryNotConfigured = errors.New("the snapshot registry is not configured: set key \"" + RegistryKey + "\" in ConfigMap " + SnapshotConfigName)

// Snapshot is the typed form of config-snapshot.
type Snapshot struct {
	// Registry is the repository prefix images are pushed under.
	Registry string
	// PushSecret names the dockerconfigjson Secret bound to the Task.
	PushSecret string
	// RegistrySecret names the Secret the controller uses at the registry.
	RegistrySecret string
	// InsecureRegistry allows plain HTTP to the registry.
	InsecureRegistry bool
	// RegistryCAConfigMap names a ConfigMap of the operator's namespace
	// whose values are PEM certificates that verify the registry's, beside
	// the system's roots; empty for the system's alone.
	RegistryCAConfigMap string
	// CommitTimeout bounds each commit TaskRun.
	CommitTimeout time.Duration
	// ContainerdSocket is the containerd socket's path on the nodes.
	ContainerdSocket string
	// OverlayfsRoot is containerd's overlayfs root on the nodes; empty turns the copy off.
	OverlayfsRoot string
	// NodePools override ContainerdSocket and OverlayfsRoot on the nodes
	// they select (OnNode).
	NodePools []NodePool
	// TaskName names the commit Task, namespaced or in TaskBundle.
	TaskName string
	// TaskBundle is a Tekton bundle holding the commit Task, pinned by digest.
	TaskBundle string
	// DefaultClass is the class of snapshots without the class annotation.
	DefaultClass string
	// PriorityClass is that of the TaskRuns' pods; empty for none.
	PriorityClass string
	// MaxLayers is how many layers commits stack before one squashes; 0 never.
	MaxLayers int
	// MaxPause bounds how long a commit keeps the sandbox frozen.
	MaxPause time.Duration
	// KeepLocal keeps pushed images in the node's containerd for a resume there.
	KeepLocal bool
	// KeepLocalMaxSize bounds the node disk kept images hold, a quantity.
	KeepLocalMaxSize string
	// DiskReserve is what a commit leaves free on each node filesystem it
	// writes to: a percentage or a quantity (task.ParseDiskReserve).
	DiskReserve string
	// CommitEphemeralStorage is the commit step's ephemeral-storage request
	// and limit, a quantity; empty for none.
	CommitEphemeralStorage string
	// SnapshotMode applies to snapshots without sandbox.SnapshotModeAnnotation.
	SnapshotMode string
	// MemoryFallback is what a memory snapshot does where it cannot be taken.
	MemoryFallback string
	// MemoryRestoreBase is the image, pinned by digest, a restore lays a
	// self-contained memory snapshot over; empty for none.
	MemoryRestoreBase string
	// MemoryAnonymousPull is task.MemoryAnonymousPullRefuse or
	// task.MemoryAnonymousPullAllow.
	MemoryAnonymousPull string
	// CheckpointDir is the node directory containerd writes memory snapshots to.
	CheckpointDir string
	// TaskRunRetentionSucceeded is how long a Succeed snapshot's TaskRuns stay.
	TaskRunRetentionSucceeded time.Duration
	// TaskRunRetentionFailed is the same for a Failed snapshot.
	TaskRunRetentionFailed time.Duration
	// ImageDeletionPolicy applies to snapshots without its annotation.
	ImageDeletionPolicy ImageDeletionPolicy
	// ImageDeletionTimeout bounds how long an image's deletion retries.
	ImageDeletionTimeout time.Duration
	// ImageCheckInterval spaces the look-ups of a snapshot's images; 0 is off.
	ImageCheckInterval time.Duration
	// ImageChecksPerMinute bounds the image look-ups of all snapshots.
	ImageChecksPerMinute int

	// ResourceVersion is that of the ConfigMap these settings come from.
	ResourceVersion string

	// Err is why the settings cannot be used, or nil.
	Err error
}

// NewSnapshotFromConfigMap parses config-snapshot. It never fails: problems go
// to Snapshot.Err, and snapshots fail with it while the controller runs on.
func NewSnapshotFromConfigMap(cm *corev1.ConfigMap) (*Snapshot, error) {
	s := &Snapshot{
		ResourceVersion:        cm.ResourceVersion,
		Registry:               strings.TrimSuffix(strings.TrimSpace(cm.Data[RegistryKey]), "/"),
		PushSecret:             strings.TrimSpace(cm.Data[PushSecretKey]),
		RegistrySecret:         strings.TrimSpace(cm.Data[RegistrySecretKey]),
		CommitTimeout:          DefaultCommitTimeout,
		ContainerdSocket:       DefaultContainerdSocket,
		OverlayfsRoot:          DefaultOverlayfsRoot,
		TaskName:               task.Name,
		DefaultClass:           sandbox.TektonClass,
		PriorityClass:          DefaultPriorityClass,
		MaxLayers:              DefaultMaxLayers,
		MaxPause:               task.DefaultMaxPause,
		KeepLocal:              task.DefaultKeepLocal,
		KeepLocalMaxSize:       task.DefaultKeepLocalMaxSize,
		DiskReserve:            task.DefaultDiskReserve,
		CommitEphemeralStorage: DefaultCommitEphemeralStorage,
		SnapshotMode:           task.SnapshotModeFilesystem,
		MemoryFallback:         task.MemoryFallbackNone,
		MemoryAnonymousPull:    task.MemoryAnonymousPullRefuse,
		CheckpointDir:          task.DefaultCheckpointDir,

		TaskRunRetentionSucceeded: DefaultTaskRunRetentionSucceeded,
		TaskRunRetentionFailed:    DefaultTaskRunRetentionFailed,
		ImageDeletionPolicy:       ImageDeletionRetain,
		ImageDeletionTimeout:      DefaultImageDeletionTimeout,
		ImageCheckInterval:        DefaultImageCheckInterval,
		ImageChecksPerMinute:      DefaultImageChecksPerMinute,
	}
	var errs []error
	if v, ok := cm.Data[InsecureRegistryKey]; ok {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			errs = append(errs, fmt.Errorf("key %q: %q is not a boolean", InsecureRegistryKey, v))
		}
		s.InsecureRegistry = b
	}
	if err := parseDuration(cm.Data, CommitTimeoutKey, "10m", &s.CommitTimeout, func(d time.Duration) string {
		if d <= 0 {
			return "must be positive"
		}
		return ""
	}); err != nil {
		errs = append(errs, err)
	}
	if v := strings.TrimSpace(cm.Data[ContainerdSocketKey]); v != "" {
		if !strings.HasPrefix(v, "/") {
			errs = append(errs, fmt.Errorf("key %q: %q is not an absolute path", ContainerdSocketKey, v))
		}
		s.ContainerdSocket = v
	}
	if v, ok := cm.Data[OverlayfsRootKey]; ok {
		if v = strings.TrimSpace(v); v != "" && !strings.HasPrefix(v, "/") {
			errs = append(errs, fmt.Errorf("key %q: %q is not an absolute path", OverlayfsRootKey, v))
		}
		s.OverlayfsRoot = v
	}
	if v := strings.TrimSpace(cm.Data[NodePoolsKey]); v != "" {
		if pools, err := parseNodePools(v); err != nil {
			errs = append(errs, fmt.Errorf("key %q: %w", NodePoolsKey, err))
		} else {
			s.NodePools = pools
		}
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
	if v, ok := cm.Data[PriorityClassKey]; ok {
		if v = strings.TrimSpace(v); v != "" {
			if errs2 := validation.IsDNS1123Subdomain(v); len(errs2) > 0 {
				errs = append(errs, fmt.Errorf("key %q: %q is not a PriorityClass name: %s", PriorityClassKey, v, strings.Join(errs2, "; ")))
			}
		}
		s.PriorityClass = v
	}
	// The Task's tunable params, bounded as the committer bounds them.
	if v, ok := cm.Data[MaxLayersKey]; ok {
		if n, err := task.ParseMaxLayers(v); err != nil {
			errs = append(errs, fmt.Errorf("key %q: %w", MaxLayersKey, err))
		} else {
			s.MaxLayers = n
		}
	}
	if v, ok := cm.Data[MaxPauseKey]; ok {
		if d, err := task.ParseMaxPause(v); err != nil {
			errs = append(errs, fmt.Errorf("key %q: %w", MaxPauseKey, err))
		} else if d >= s.CommitTimeout {
			errs = append(errs, fmt.Errorf("key %q: %q is not shorter than %s %s", MaxPauseKey, v, CommitTimeoutKey, s.CommitTimeout))
		} else {
			s.MaxPause = d
		}
	}
	if v, ok := cm.Data[KeepLocalKey]; ok {
		if b, err := task.ParseKeepLocal(v); err != nil {
			errs = append(errs, fmt.Errorf("key %q: %w", KeepLocalKey, err))
		} else {
			s.KeepLocal = b
		}
	}
	if v, ok := cm.Data[KeepLocalMaxSizeKey]; ok {
		if _, err := task.ParseKeepLocalMaxSize(v); err != nil {
			errs = append(errs, fmt.Errorf("key %q: %w", KeepLocalMaxSizeKey, err))
		} else {
			s.KeepLocalMaxSize = strings.TrimSpace(v)
		}
	}
	if v, ok := cm.Data[DiskReserveKey]; ok {
		if r, err := task.ParseDiskReserve(v); err != nil {
			errs = append(errs, fmt.Errorf("key %q: %w", DiskReserveKey, err))
		} else {
			s.DiskReserve = r.String()
		}
	}
	if v := strings.TrimSpace(cm.Data[RegistryCAConfigMapKey]); v != "" {
		if errs2 := validation.IsDNS1123Subdomain(v); len(errs2) > 0 {
			errs = append(errs, fmt.Errorf("key %q: %q is not a ConfigMap name: %s", RegistryCAConfigMapKey, v, strings.Join(errs2, "; ")))
		}
		s.RegistryCAConfigMap = v
	}
	if v, ok := cm.Data[CommitEphemeralStorageKey]; ok {
		if q, err := parseEphemeralStorage(v); err != nil {
			errs = append(errs, fmt.Errorf("key %q: %w", CommitEphemeralStorageKey, err))
		} else {
			s.CommitEphemeralStorage = q
		}
	}
	if v, ok := cm.Data[SnapshotModeKey]; ok {
		if m, err := ParseSnapshotMode(v); err != nil {
			errs = append(errs, fmt.Errorf("key %q: %w", SnapshotModeKey, err))
		} else {
			s.SnapshotMode = m
		}
	}
	if v, ok := cm.Data[MemoryFallbackKey]; ok {
		switch v = strings.TrimSpace(v); v {
		case task.MemoryFallbackNone, task.MemoryFallbackFilesystem:
			s.MemoryFallback = v
		default:
			errs = append(errs, fmt.Errorf("key %q: %q is neither %q nor %q", MemoryFallbackKey, v, task.MemoryFallbackNone, task.MemoryFallbackFilesystem))
		}
	}
	if v, ok := cm.Data[MemoryRestoreBaseKey]; ok {
		if ref, err := task.ParseMemoryRestoreBase(v); err != nil {
			errs = append(errs, fmt.Errorf("key %q: %w", MemoryRestoreBaseKey, err))
		} else {
			s.MemoryRestoreBase = ref
		}
	}
	if v, ok := cm.Data[MemoryAnonymousPullKey]; ok {
		if allow, err := task.ParseMemoryAnonymousPull(v); err != nil {
			errs = append(errs, fmt.Errorf("key %q: %w", MemoryAnonymousPullKey, err))
		} else if allow {
			s.MemoryAnonymousPull = task.MemoryAnonymousPullAllow
		}
	}
	if v := strings.TrimSpace(cm.Data[CheckpointDirKey]); v != "" {
		if !strings.HasPrefix(v, "/") {
			errs = append(errs, fmt.Errorf("key %q: %q is not an absolute path", CheckpointDirKey, v))
		}
		s.CheckpointDir = v
	}
	for key, d := range map[string]*time.Duration{
		TaskRunRetentionSucceededKey: &s.TaskRunRetentionSucceeded,
		TaskRunRetentionFailedKey:    &s.TaskRunRetentionFailed,
	} {
		if err := parseRetention(cm.Data, key, d); err != nil {
			errs = append(errs, err)
		}
	}
	if v, ok := cm.Data[ImageDeletionPolicyKey]; ok {
		p, err := ParseImageDeletionPolicy(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("key %q: %w", ImageDeletionPolicyKey, err))
		} else {
			s.ImageDeletionPolicy = p
		}
	}
	if err := parseDuration(cm.Data, ImageDeletionTimeoutKey, "1h", &s.ImageDeletionTimeout, notNegative("")); err != nil {
		errs = append(errs, err)
	}
	if err := parseDuration(cm.Data, ImageCheckIntervalKey, "1h", &s.ImageCheckInterval, notNegative(" (0 turns the check off)")); err != nil {
		errs = append(errs, err)
	}
	if v, ok := cm.Data[ImageChecksPerMinuteKey]; ok {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n <= 0 {
			errs = append(errs, fmt.Errorf("key %q: %q is not a positive whole number", ImageChecksPerMinuteKey, v))
		} else {
			s.ImageChecksPerMinute = n
		}
	}
	if s.Registry == "" {
		errs = append(errs, ErrRegistryNotConfigured)
	}
	if len(errs) > 0 {
		s.Err = fmt.Errorf("ConfigMap %s: %w", SnapshotConfigName, errors.Join(errs...))
	}
	return s, nil
}

// ImageDeletionPolicyOf returns a snapshot's annotated or configured policy.
func (s *Snapshot) ImageDeletionPolicyOf(namespace, name string, annotations map[string]string) (ImageDeletionPolicy, error) {
	v, ok := annotations[sandbox.ImageDeletionPolicyAnnotation]
	if !ok {
		return s.ImageDeletionPolicy, nil
	}
	p, err := ParseImageDeletionPolicy(v)
	if err != nil {
		return "", fmt.Errorf("SandboxSnapshot %s/%s: annotation %s: %w", namespace, name, sandbox.ImageDeletionPolicyAnnotation, err)
	}
	return p, nil
}

// ParseSnapshotMode parses task.SnapshotModeFilesystem or task.SnapshotModeMemory.
func ParseSnapshotMode(v string) (string, error) {
	switch v = strings.TrimSpace(v); v {
	case task.SnapshotModeFilesystem, task.SnapshotModeMemory:
		return v, nil
	}
	return "", fmt.Errorf("%q is neither %q nor %q", v, task.SnapshotModeFilesystem, task.SnapshotModeMemory)
}

// SnapshotModeOf returns a snapshot's annotated or configured mode.
func (s *Snapshot) SnapshotModeOf(namespace, name string, annotations map[string]string) (string, error) {
	v, ok := annotations[sandbox.SnapshotModeAnnotation]
	if !ok {
		return s.SnapshotMode, nil
	}
	m, err := ParseSnapshotMode(v)
	if err != nil {
		return "", fmt.Errorf("SandboxSnapshot %s/%s: annotation %s: %w", namespace, name, sandbox.SnapshotModeAnnotation, err)
	}
	return m, nil
}

// ControllerSecret returns RegistrySecret, else PushSecret.
func (s *Snapshot) ControllerSecret() string {
	if s.RegistrySecret != "" {
		return s.RegistrySecret
	}
	return s.PushSecret
}

// TaskRunRetention returns the TaskRun retention for the given outcome.
func (s *Snapshot) TaskRunRetention(succeeded bool) time.Duration {
	if succeeded {
		return s.TaskRunRetentionSucceeded
	}
	return s.TaskRunRetentionFailed
}

// parseRetention reads a non-negative duration, or "-1" for KeepTaskRuns.
func parseRetention(data map[string]string, key string, d *time.Duration) error {
	if strings.TrimSpace(data[key]) == "-1" {
		*d = KeepTaskRuns
		return nil
	}
	return parseDuration(data, key, "5m, or -1", d, notNegative("; -1 keeps the TaskRuns until their snapshot is deleted"))
}

// parseDuration sets *d from the duration at key, if set, unless check says
// what is wrong with it.
func parseDuration(data map[string]string, key, example string, d *time.Duration, check func(time.Duration) string) error {
	v, ok := data[key]
	if !ok {
		return nil
	}
	var parsed time.Duration
	if err := configmap.AsDuration(key, &parsed)(map[string]string{key: strings.TrimSpace(v)}); err != nil {
		return fmt.Errorf("key %q: %q is not a duration such as %s", key, v, example)
	}
	if problem := check(parsed); problem != "" {
		return fmt.Errorf("key %q: %q %s", key, v, problem)
	}
	*d = parsed
	return nil
}

// notNegative is a parseDuration check that refuses negative durations.
func notNegative(addition string) func(time.Duration) string {
	return func(d time.Duration) string {
		if d < 0 {
			return "must not be negative" + addition
		}
		return ""
	}
}

// Handles reports whether a snapshot with these annotations is ours, not OpenSandbox's.
func (s *Snapshot) Handles(annotations map[string]string) bool {
	class, ok := annotations[sandbox.ClassAnnotation]
	if !ok {
		class = s.DefaultClass
	}
	return class == sandbox.TektonClass
}

// parseEphemeralStorage parses a commit-ephemeral-storage value: a size
// such as 20Gi, or "" or "0" for none.
func parseEphemeralStorage(v string) (string, error) {
	v = strings.TrimSpace(v)
	if v == "" || v == "0" {
		return "", nil
	}
	q, err := resource.ParseQuantity(v)
	if err != nil || q.Sign() <= 0 {
		return "", fmt.Errorf("%q is not a size such as 20Gi (or \"0\" for none)", v)
	}
	return q.String(), nil
}
