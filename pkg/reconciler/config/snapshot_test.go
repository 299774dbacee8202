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

package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logtesting "knative.dev/pkg/logging/testing"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox"
)

func TestNewSnapshotFromConfigMapDefaults(t *testing.T) {
	s, err := NewSnapshotFromConfigMap(&corev1.ConfigMap{Data: map[string]string{RegistryKey: " registry.test/snaps/ "}})
	if err != nil || s.Err != nil {
		t.Fatalf("NewSnapshotFromConfigMap() = %v, %v", err, s.Err)
	}
	want := Snapshot{
		Registry:               "registry.test/snaps",
		CommitTimeout:          10 * time.Minute,
		ContainerdSocket:       "/var/run/containerd/containerd.sock",
		OverlayfsRoot:          "/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs",
		TaskName:               "sandbox-commit",
		DefaultClass:           "tekton",
		PriorityClass:          "sandbox-snapshot-commit",
		MaxLayers:              16,
		MaxPause:               20 * time.Second,
		KeepLocal:              false,
		KeepLocalMaxSize:       "20Gi",
		DiskReserve:            "10%",
		CommitEphemeralStorage: "20Gi",
		SnapshotMode:           "Filesystem",
		MemoryFallback:         "None",
		MemoryAnonymousPull:    "Refuse",
		CheckpointDir:          "/var/lib/sandbox-snapshot-operator/checkpoints",

		TaskRunRetentionSucceeded: 5 * time.Minute,
		TaskRunRetentionFailed:    24 * time.Hour,
		ImageDeletionPolicy:       ImageDeletionRetain,
		ImageDeletionTimeout:      time.Hour,
		ImageCheckInterval:        time.Hour,
		ImageChecksPerMinute:      60,
	}
	if diff := cmp.Diff(want, *s, cmpopts.EquateErrors()); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
}

// testRestoreBase is a restore base pinned by digest.
const testRestoreBase = "registry.test/restore-base@sha256:4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"

// testBundle is a bundle reference pinned by digest.
const testBundle = "registry.test/tasks/sandbox-commit@sha256:4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"

func TestNewSnapshotFromConfigMapValues(t *testing.T) {
	s, _ := NewSnapshotFromConfigMap(&corev1.ConfigMap{Data: map[string]string{
		RegistryKey: "r.test", PushSecretKey: "push", InsecureRegistryKey: "true", CommitTimeoutKey: " 2m ",
		ContainerdSocketKey: "/run/containerd.sock", TaskNameKey: "my-commit", DefaultClassKey: "opensandbox",
		OverlayfsRootKey:             " /data/containerd/io.containerd.snapshotter.v1.overlayfs ",
		PriorityClassKey:             " ",
		TaskBundleKey:                " " + testBundle + " ",
		TaskRunRetentionSucceededKey: "0", TaskRunRetentionFailedKey: " -1 ", ImageDeletionPolicyKey: "Delete",
		ImageDeletionTimeoutKey: "30m ", ImageCheckIntervalKey: " 0", ImageChecksPerMinuteKey: "5", MaxLayersKey: " 0 ",
		SnapshotModeKey: " Memory ", MemoryFallbackKey: "Filesystem", CheckpointDirKey: "/srv/checkpoints",
		MaxPauseKey: " 45s ", KeepLocalKey: "true", KeepLocalMaxSizeKey: " 5Gi ", CommitEphemeralStorageKey: " 512Mi ",
		DiskReserveKey: " 2.5% ", MemoryRestoreBaseKey: " " + testRestoreBase + " ", MemoryAnonymousPullKey: "Allow",
	}})
	want := Snapshot{Registry: "r.test", PushSecret: "push", InsecureRegistry: true, CommitTimeout: 2 * time.Minute,
		ContainerdSocket: "/run/containerd.sock", TaskName: "my-commit", TaskBundle: testBundle, DefaultClass: "opensandbox",
		OverlayfsRoot:             "/data/containerd/io.containerd.snapshotter.v1.overlayfs",
		TaskRunRetentionSucceeded: 0, TaskRunRetentionFailed: KeepTaskRuns, ImageDeletionPolicy: ImageDeletionDelete,
		ImageDeletionTimeout: 30 * time.Minute, ImageCheckInterval: 0, ImageChecksPerMinute: 5,
		SnapshotMode: "Memory", MemoryFallback: "Filesystem", CheckpointDir: "/srv/checkpoints",
		MaxPause: 45 * time.Second, KeepLocal: true, KeepLocalMaxSize: "5Gi", CommitEphemeralStorage: "512Mi",
		DiskReserve: "2.5%", MemoryRestoreBase: testRestoreBase, MemoryAnonymousPull: "Allow"}
	if diff := cmp.Diff(want, *s, cmpopts.EquateErrors()); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
}

// TestOverlayfsRootOff checks that an empty containerd-overlayfs-root turns
// the commit step's copy of upper directories off, rather than defaulting.
func TestOverlayfsRootOff(t *testing.T) {
	s, _ := NewSnapshotFromConfigMap(&corev1.ConfigMap{Data: map[string]string{RegistryKey: "r", OverlayfsRootKey: " "}})
	if s.Err != nil || s.OverlayfsRoot != "" {
		t.Errorf("OverlayfsRoot = %q, Err = %v; want it empty, no error", s.OverlayfsRoot, s.Err)
	}
}

// TestNewSnapshotFromConfigMapErrors checks that bad settings never fail the
// parse, which would stop the controller, but are reported naming the key.
func TestNewSnapshotFromConfigMapErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		data map[string]string
		want string
	}{
		{"missing registry", map[string]string{}, `set key "registry"`},
		{"bad timeout", map[string]string{RegistryKey: "r", CommitTimeoutKey: "ten minutes"}, `key "commit-timeout": "ten minutes" is not a duration`},
		{"bad snapshot mode", map[string]string{RegistryKey: "r", SnapshotModeKey: "memory"}, `key "snapshot-mode": "memory" is neither "Filesystem" nor "Memory"`},
		{"bad memory fallback", map[string]string{RegistryKey: "r", MemoryFallbackKey: "Fail"}, `key "memory-fallback": "Fail" is neither "None" nor "Filesystem"`},
		{"restore base by tag", map[string]string{RegistryKey: "r", MemoryRestoreBaseKey: "registry.test/restore-base:1"}, `key "memory-restore-base": "registry.test/restore-base:1" is not an image pinned by digest`},
		{"bad anonymous pull", map[string]string{RegistryKey: "r", MemoryAnonymousPullKey: "yes"}, `key "memory-anonymous-pull": "yes" is neither "Refuse" nor "Allow"`},
		{"relative checkpoint dir", map[string]string{RegistryKey: "r", CheckpointDirKey: "checkpoints"}, `key "checkpoint-dir": "checkpoints" is not an absolute path`},
		{"negative timeout", map[string]string{RegistryKey: "r", CommitTimeoutKey: "-1m"}, `key "commit-timeout": "-1m" must be positive`},
		{"bad insecure flag", map[string]string{RegistryKey: "r", InsecureRegistryKey: "maybe"}, `key "insecure-registry": "maybe" is not a boolean`},
		{"bad retention", map[string]string{RegistryKey: "r", TaskRunRetentionSucceededKey: "soon"}, `key "taskrun-retention-succeeded": "soon" is not a duration such as 5m, or -1`},
		{"negative retention", map[string]string{RegistryKey: "r", TaskRunRetentionFailedKey: "-5m"}, `key "taskrun-retention-failed": "-5m" must not be negative; -1 keeps`},
		{"bad deletion policy", map[string]string{RegistryKey: "r", ImageDeletionPolicyKey: "delete"}, `key "image-deletion-policy": "delete" is neither "Retain" nor "Delete"`},
		{"bad deletion timeout", map[string]string{RegistryKey: "r", ImageDeletionTimeoutKey: "-1h"}, `key "image-deletion-timeout": "-1h" must not be negative`},
		{"bad check interval", map[string]string{RegistryKey: "r", ImageCheckIntervalKey: "hourly"}, `key "image-check-interval": "hourly" is not a duration`},
		{"bad check rate", map[string]string{RegistryKey: "r", ImageChecksPerMinuteKey: "0"}, `key "image-checks-per-minute": "0" is not a positive whole number`},
		{"relative socket", map[string]string{RegistryKey: "r", ContainerdSocketKey: "containerd.sock"}, `key "containerd-socket": "containerd.sock" is not an absolute path`},
		{"relative overlayfs root", map[string]string{RegistryKey: "r", OverlayfsRootKey: "containerd/overlayfs"}, `key "containerd-overlayfs-root": "containerd/overlayfs" is not an absolute path`},
		{"bad max-layers", map[string]string{RegistryKey: "r", MaxLayersKey: "16 layers"}, `key "max-layers": "16 layers" is not a whole number from 0 (never squash) to 128`},
		{"max-layers past overlayfs", map[string]string{RegistryKey: "r", MaxLayersKey: "600"}, `key "max-layers": "600" is not a whole number from 0`},
		{"bad max-pause", map[string]string{RegistryKey: "r", MaxPauseKey: "20"}, `key "max-pause": "20" is not a positive duration such as 20s`},
		{"zero max-pause", map[string]string{RegistryKey: "r", MaxPauseKey: "0s"}, `key "max-pause": "0s" is not a positive duration`},
		{"max-pause past the commit's timeout", map[string]string{RegistryKey: "r", CommitTimeoutKey: "1m", MaxPauseKey: "2m"}, `key "max-pause": "2m" is not shorter than commit-timeout 1m0s`},
		{"bad keep-local", map[string]string{RegistryKey: "r", KeepLocalKey: "yes"}, `key "keep-local": "yes" is neither "true" nor "false"`},
		{"bad registry-ca-configmap", map[string]string{RegistryKey: "r", RegistryCAConfigMapKey: "Corp CA"}, `key "registry-ca-configmap": "Corp CA" is not a ConfigMap name`},
		{"bad commit-ephemeral-storage", map[string]string{RegistryKey: "r", CommitEphemeralStorageKey: "-1Gi"}, `key "commit-ephemeral-storage": "-1Gi" is not a size such as 20Gi`},
		{"bad keep-local-max-size", map[string]string{RegistryKey: "r", KeepLocalMaxSizeKey: "-1Gi"}, `key "keep-local-max-size": "-1Gi" is not a size such as 20Gi`},
		{"disk-reserve past half", map[string]string{RegistryKey: "r", DiskReserveKey: "75%"}, `key "disk-reserve": "75%" is not a percentage from 0% to 50%, such as 10%`},
		{"disk-reserve neither", map[string]string{RegistryKey: "r", DiskReserveKey: "ten"}, `key "disk-reserve": "ten" is neither a percentage such as 10% nor a size such as 20Gi`},
		{"bad priority class", map[string]string{RegistryKey: "r", PriorityClassKey: "High_Priority"}, `key "priority-class-name": "High_Priority" is not a PriorityClass name`},
		// A tag can be pushed again: the Task could change under the operator.
		{"bundle by tag", map[string]string{RegistryKey: "r", TaskBundleKey: "registry.test/tasks/sandbox-commit:v1"}, `key "task-bundle": "registry.test/tasks/sandbox-commit:v1" is not a bundle pinned by digest`},
		{"bundle by tag and bad digest", map[string]string{RegistryKey: "r", TaskBundleKey: "registry.test/tasks/sandbox-commit:v1@sha256:123"}, `key "task-bundle": "registry.test/tasks/sandbox-commit:v1@sha256:123" is not a bundle pinned by digest`},
		// Strict: no registry defaulted to Docker Hub.
		{"bundle without a registry", map[string]string{RegistryKey: "r", TaskBundleKey: "sandbox-commit@sha256:4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"}, `key "task-bundle": "sandbox-commit@sha256:`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewSnapshotFromConfigMap(&corev1.ConfigMap{Data: tc.data})
			if err != nil {
				t.Fatalf("NewSnapshotFromConfigMap() error = %v; a bad ConfigMap must not fail the parse", err)
			}
			if s.Err == nil || !strings.Contains(s.Err.Error(), tc.want) || !strings.Contains(s.Err.Error(), "ConfigMap config-snapshot") {
				t.Errorf("Err = %v, want it to name the ConfigMap and contain %q", s.Err, tc.want)
			}
		})
	}
	s, _ := NewSnapshotFromConfigMap(&corev1.ConfigMap{})
	if !errors.Is(s.Err, ErrRegistryNotConfigured) {
		t.Errorf("Err = %v, want ErrRegistryNotConfigured", s.Err)
	}
}

func TestHandles(t *testing.T) {
	tekton, _ := NewSnapshotFromConfigMap(&corev1.ConfigMap{})
	other, _ := NewSnapshotFromConfigMap(&corev1.ConfigMap{Data: map[string]string{DefaultClassKey: "opensandbox"}})
	annotated := map[string]string{sandbox.ClassAnnotation: sandbox.TektonClass}
	foreign := map[string]string{sandbox.ClassAnnotation: "opensandbox"}
	for _, tc := range []struct {
		name        string
		cfg         *Snapshot
		annotations map[string]string
		want        bool
	}{
		{"unannotated, default tekton", tekton, nil, true},
		{"unannotated, default another class", other, nil, false},
		{"annotated tekton, default another class", other, annotated, true},
		{"annotated another class", tekton, foreign, false},
	} {
		if got := tc.cfg.Handles(tc.annotations); got != tc.want {
			t.Errorf("%s: Handles() = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestStore(t *testing.T) {
	store := NewStore(logtesting.TestLogger(t))
	if got := store.Load().Snapshot; !errors.Is(got.Err, ErrRegistryNotConfigured) || got.DefaultClass != "tekton" {
		t.Errorf("Load() before any ConfigMap = %+v, want defaults without a registry", got)
	}
	store.OnConfigChanged(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: SnapshotConfigName},
		Data:       map[string]string{RegistryKey: "r.test"},
	})
	ctx := store.ToContext(t.Context())
	if got := FromContext(ctx).Snapshot.Registry; got != "r.test" {
		t.Errorf("FromContext().Snapshot.Registry = %q, want r.test", got)
	}
}

func TestImageDeletionPolicyOf(t *testing.T) {
	retain, _ := NewSnapshotFromConfigMap(&corev1.ConfigMap{})
	del, _ := NewSnapshotFromConfigMap(&corev1.ConfigMap{Data: map[string]string{ImageDeletionPolicyKey: "Delete"}})
	for _, tc := range []struct {
		name        string
		cfg         *Snapshot
		annotations map[string]string
		want        ImageDeletionPolicy
	}{
		{"default Retain", retain, nil, ImageDeletionRetain},
		{"configured Delete", del, nil, ImageDeletionDelete},
		{"annotation overrides the configured policy", del, map[string]string{sandbox.ImageDeletionPolicyAnnotation: "Retain"}, ImageDeletionRetain},
		{"annotation Delete under default Retain", retain, map[string]string{sandbox.ImageDeletionPolicyAnnotation: "Delete"}, ImageDeletionDelete},
	} {
		if got, err := tc.cfg.ImageDeletionPolicyOf("ns", "snap", tc.annotations); err != nil || got != tc.want {
			t.Errorf("%s: ImageDeletionPolicyOf() = %q, %v, want %q", tc.name, got, err, tc.want)
		}
	}
	_, err := retain.ImageDeletionPolicyOf("ns", "snap", map[string]string{sandbox.ImageDeletionPolicyAnnotation: "Keep"})
	want := `SandboxSnapshot ns/snap: annotation sandbox.opensandbox.io/image-deletion-policy: "Keep" is neither "Retain" nor "Delete"`
	if err == nil || err.Error() != want {
		t.Errorf("ImageDeletionPolicyOf(Keep) error = %v, want %q", err, want)
	}
}

// TestControllerSecret: the controller uses its own Secret at the registry
// when registry-secret names one, and the push Secret's otherwise.
func TestControllerSecret(t *testing.T) {
	for _, tc := range []struct {
		data map[string]string
		want string
	}{
		{map[string]string{RegistryKey: "r.test/s", PushSecretKey: "push", RegistrySecretKey: " delete "}, "delete"},
		{map[string]string{RegistryKey: "r.test/s", PushSecretKey: "push"}, "push"},
		{map[string]string{RegistryKey: "r.test/s"}, ""},
	} {
		s, _ := NewSnapshotFromConfigMap(&corev1.ConfigMap{Data: tc.data})
		if s.Err != nil || s.ControllerSecret() != tc.want {
			t.Errorf("ControllerSecret() of %v = %q (%v), want %q", tc.data, s.ControllerSecret(), s.Err, tc.want)
		}
	}
}

// TestParseEphemeralStorage checks commit-ephemeral-storage: a size, or
// none for "" and "0".
func TestParseEphemeralStorage(t *testing.T) {
	for in, want := range map[string]string{"20Gi": "20Gi", " 512Mi ": "512Mi", "": "", "0": "", "1e9": "1e9"} {
		if got, err := parseEphemeralStorage(in); err != nil || got != want {
			t.Errorf("parseEphemeralStorage(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"-1Gi", "lots", "0.5.5"} {
		if got, err := parseEphemeralStorage(in); err == nil {
			t.Errorf("parseEphemeralStorage(%q) = %q, want an error", in, got)
		}
	}
}
