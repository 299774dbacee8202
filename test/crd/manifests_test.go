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

package crd

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	serializerjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/sets"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"knative.dev/pkg/configmap"
	"knative.dev/pkg/leaderelection"
	"knative.dev/pkg/logging"
	"knative.dev/pkg/observability"
	"sigs.k8s.io/yaml"

	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/apis/sandbox/v1alpha1"
	"github.com/opensandbox-group/sandbox-snapshot-operator/pkg/reconciler/config"
)

const (
	rootDir         = "../.."
	configDir       = rootDir + "/config"
	systemNamespace = "sandbox-snapshot-system"
	serviceAccount  = "sandbox-snapshot-controller"
	modulePath      = "github.com/opensandbox-group/sandbox-snapshot-operator"
)

// doc is one YAML document of a manifest file.
type doc struct {
	file string
	raw  []byte
	obj  *unstructured.Unstructured
}

func (d doc) String() string {
	return d.file + ": " + d.obj.GetKind() + " " + d.obj.GetName()
}

// readDocs parses every YAML document under config/, samples included.
func readDocs(t *testing.T) []doc {
	t.Helper()
	var docs []doc
	err := filepath.WalkDir(configDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || (filepath.Ext(path) != ".yaml" && filepath.Ext(path) != ".yml") {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		rel, _ := filepath.Rel(rootDir, path)
		reader := utilyaml.NewYAMLReader(bufio.NewReader(f))
		for {
			raw, err := reader.Read()
			if errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Errorf("%s: %v", rel, err)
				break
			}
			js, err := yaml.YAMLToJSON(raw)
			if err != nil {
				t.Errorf("%s: not YAML: %v", rel, err)
				continue
			}
			if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
				continue // only comments
			}
			obj := &unstructured.Unstructured{}
			if err := obj.UnmarshalJSON(js); err != nil {
				t.Errorf("%s: not a Kubernetes object: %v", rel, err)
				continue
			}
			docs = append(docs, doc{file: rel, raw: raw, obj: obj})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("no manifests under config/")
	}
	return docs
}

// operatorDocs are the deployable documents: config/ without config/samples.
func operatorDocs(t *testing.T) []doc {
	t.Helper()
	var out []doc
	for _, d := range readDocs(t) {
		if !strings.HasPrefix(d.file, "config/samples/") {
			out = append(out, d)
		}
	}
	return out
}

// decode decodes a document strictly into its typed form, so that misspelt
// or misplaced fields fail. It returns nil for kinds outside the scheme.
func decode(t *testing.T, d doc) runtime.Object {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	s := serializerjson.NewSerializerWithOptions(serializerjson.DefaultMetaFactory, scheme, scheme, serializerjson.SerializerOptions{Yaml: true, Strict: true})
	obj, _, err := s.Decode(d.raw, nil, nil)
	if runtime.IsNotRegisteredError(err) {
		return nil
	} else if err != nil {
		t.Errorf("%s: %v", d, err)
		return nil
	}
	return obj
}

// find returns the typed operator object of the given kind and name.
func find[T runtime.Object](t *testing.T, docs []doc, kind, name string) T {
	t.Helper()
	var zero T
	for _, d := range docs {
		if d.obj.GetKind() == kind && d.obj.GetName() == name {
			obj, ok := decode(t, d).(T)
			if !ok {
				t.Fatalf("%s does not decode to %T", d, zero)
			}
			return obj
		}
	}
	t.Fatalf("no %s %q under config/", kind, name)
	return zero
}

func TestEveryManifestParses(t *testing.T) {
	crd := loadCRD(t)
	for _, d := range readDocs(t) {
		if d.obj.GetAPIVersion() == "" || d.obj.GetKind() == "" || d.obj.GetName() == "" {
			t.Errorf("%s: apiVersion, kind and metadata.name are required", d)
			continue
		}
		if decode(t, d) != nil {
			continue
		}
		// Our own kind: validate it as the API server would.
		if d.obj.GroupVersionKind() == v1alpha1.SchemeGroupVersion.WithKind(crd.crd.Spec.Names.Kind) {
			if errs := crd.create(t, d.obj.DeepCopy().Object); len(errs) > 0 {
				t.Errorf("%s: rejected by the CRD:\n%s", d, errs.ToAggregate())
			}
		}
	}
}

func TestNamespacedObjectsAreInTheSystemNamespace(t *testing.T) {
	docs := operatorDocs(t)
	clusterScoped := sets.New("Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "PriorityClass")
	for _, d := range docs {
		if clusterScoped.Has(d.obj.GetKind()) {
			if d.obj.GetNamespace() != "" {
				t.Errorf("%s: cluster-scoped, but has namespace %q", d, d.obj.GetNamespace())
			}
		} else if d.obj.GetNamespace() != systemNamespace {
			t.Errorf("%s: namespace %q, want %q", d, d.obj.GetNamespace(), systemNamespace)
		}
	}
	ns := find[*corev1.Namespace](t, docs, "Namespace", systemNamespace)
	if got := ns.Labels["pod-security.kubernetes.io/enforce"]; got != "privileged" {
		t.Errorf("namespace %s enforces Pod Security level %q, want privileged (the commit pods mount a hostPath socket)", systemNamespace, got)
	}
}

func TestRBACHasNoWildcards(t *testing.T) {
	for _, d := range readDocs(t) {
		var rules []rbacv1.PolicyRule
		switch obj := decode(t, d).(type) {
		case *rbacv1.Role:
			rules = obj.Rules
		case *rbacv1.ClusterRole:
			rules = obj.Rules
			if obj.AggregationRule != nil {
				t.Errorf("%s: aggregates other ClusterRoles", d)
			}
		default:
			continue
		}
		for i, r := range rules {
			for field, values := range map[string][]string{
				"verbs": r.Verbs, "resources": r.Resources, "apiGroups": r.APIGroups,
				"resourceNames": r.ResourceNames, "nonResourceURLs": r.NonResourceURLs,
			} {
				for _, v := range values {
					if strings.Contains(v, "*") {
						t.Errorf("%s: rule %d has %q in %s", d, i, v, field)
					}
				}
			}
			if len(r.NonResourceURLs) > 0 {
				t.Errorf("%s: rule %d grants non-resource URLs %v", d, i, r.NonResourceURLs)
			}
			if len(r.Verbs) == 0 || len(r.Resources) == 0 || len(r.APIGroups) == 0 {
				t.Errorf("%s: rule %d lacks verbs, resources or apiGroups", d, i)
			}
		}
	}
}

// grant is one verb on one resource in one scope.
type grant struct{ scope, group, resource, verb string }

// TestRBACGrantsExactlyWhatTheCodeCalls pins the controller's permissions. A
// change here must come with the code path that needs it (see the comments
// in config/200-*.yaml).
func TestRBACGrantsExactlyWhatTheCodeCalls(t *testing.T) {
	docs := operatorDocs(t)
	want := sets.New[grant]()
	add := func(scope, group, resource string, verbs ...string) {
		for _, v := range verbs {
			want.Insert(grant{scope, group, resource, v})
		}
	}
	add("cluster", "sandbox.opensandbox.io", "sandboxsnapshots", "get", "list", "watch", "patch")
	add("cluster", "sandbox.opensandbox.io", "sandboxsnapshots/status", "update")
	add("cluster", "sandbox.opensandbox.io", "batchsandboxes", "get", "list", "watch")
	add("cluster", "", "pods", "get", "list", "watch")
	add("cluster", "", "nodes", "get")
	add("cluster", "batch", "jobs", "get", "list", "watch")
	add("cluster", "", "events", "create", "patch")
	add(systemNamespace, "tekton.dev", "taskruns", "get", "list", "watch", "create", "patch", "delete")
	add(systemNamespace, "", "secrets", "get")
	add(systemNamespace, "", "events", "list")
	add(systemNamespace, "", "configmaps", "get", "list", "watch", "create", "update", "delete")
	add(systemNamespace, "coordination.k8s.io", "leases", "get", "create", "update")

	got := sets.New[grant]()
	collect := func(scope string, rules []rbacv1.PolicyRule) {
		for _, r := range rules {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						got.Insert(grant{scope, g, res, v})
					}
				}
			}
		}
	}
	for _, b := range bindingsOf(t, docs) {
		switch b.roleRef.Kind {
		case "ClusterRole":
			cr := find[*rbacv1.ClusterRole](t, docs, "ClusterRole", b.roleRef.Name)
			scope := "cluster"
			if b.namespace != "" {
				scope = b.namespace
			}
			collect(scope, cr.Rules)
		case "Role":
			r := find[*rbacv1.Role](t, docs, "Role", b.roleRef.Name)
			if r.Namespace != b.namespace {
				t.Errorf("RoleBinding in %q refers to Role in %q", b.namespace, r.Namespace)
			}
			collect(r.Namespace, r.Rules)
		}
	}
	if extra := got.Difference(want); extra.Len() > 0 {
		t.Errorf("granted but not called by the code: %v", sortedGrants(extra))
	}
	if missing := want.Difference(got); missing.Len() > 0 {
		t.Errorf("called by the code but not granted: %v", sortedGrants(missing))
	}
}

func sortedGrants(s sets.Set[grant]) []grant {
	l := s.UnsortedList()
	sort.Slice(l, func(i, j int) bool {
		return strings.Join([]string{l[i].scope, l[i].group, l[i].resource, l[i].verb}, "/") <
			strings.Join([]string{l[j].scope, l[j].group, l[j].resource, l[j].verb}, "/")
	})
	return l
}

// binding is a RoleBinding or ClusterRoleBinding of the controller's ServiceAccount.
type binding struct {
	namespace string
	roleRef   rbacv1.RoleRef
}

// bindingsOf returns the bindings under config/ and checks that each binds
// only the controller's ServiceAccount, which must exist.
func bindingsOf(t *testing.T, docs []doc) []binding {
	t.Helper()
	find[*corev1.ServiceAccount](t, docs, "ServiceAccount", serviceAccount)
	var out []binding
	check := func(d doc, subjects []rbacv1.Subject) {
		if len(subjects) != 1 || subjects[0].Kind != rbacv1.ServiceAccountKind ||
			subjects[0].Name != serviceAccount || subjects[0].Namespace != systemNamespace {
			t.Errorf("%s: subjects %+v, want only ServiceAccount %s/%s", d, subjects, systemNamespace, serviceAccount)
		}
	}
	for _, d := range docs {
		switch obj := decode(t, d).(type) {
		case *rbacv1.ClusterRoleBinding:
			check(d, obj.Subjects)
			if obj.RoleRef.Kind != "ClusterRole" {
				t.Errorf("%s: a ClusterRoleBinding must refer to a ClusterRole", d)
			}
			out = append(out, binding{roleRef: obj.RoleRef})
		case *rbacv1.RoleBinding:
			check(d, obj.Subjects)
			out = append(out, binding{namespace: obj.Namespace, roleRef: obj.RoleRef})
		}
	}
	if len(out) == 0 {
		t.Fatal("no bindings under config/")
	}
	return out
}

// componentName reads the component name cmd/controller passes to sharedmain,
// which names its logger (loglevel.<component>) and its Leases.
func componentName(t *testing.T) string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), rootDir+"/cmd/controller/main.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var name string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) < 2 {
			return true
		}
		if sel, ok := call.Fun.(*ast.SelectorExpr); ok && strings.HasPrefix(sel.Sel.Name, "Main") {
			if lit, ok := call.Args[1].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				name, _ = strconv.Unquote(lit.Value)
			}
		}
		return true
	})
	if name == "" {
		t.Fatal("cmd/controller/main.go: no sharedmain.Main* call with a literal component name")
	}
	return name
}

func TestControllerDeployment(t *testing.T) {
	docs := operatorDocs(t)
	dep := find[*appsv1.Deployment](t, docs, "Deployment", "sandbox-snapshot-controller")
	pod := dep.Spec.Template.Spec
	if pod.ServiceAccountName != serviceAccount {
		t.Errorf("serviceAccountName = %q, want %q", pod.ServiceAccountName, serviceAccount)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(pod.Containers))
	}
	c := pod.Containers[0]

	const image = "ko://" + modulePath + "/cmd/controller"
	if c.Image != image {
		t.Errorf("image = %q, want %q", c.Image, image)
	}

	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if e := env["SYSTEM_NAMESPACE"]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
		t.Error("SYSTEM_NAMESPACE must come from fieldRef metadata.namespace")
	}
	// knative's defaults (5 QPS, 2 workers) would pace the controller far
	// below the API server; sharedmain reads these to lift them.
	for _, name := range []string{"KUBE_API_QPS", "KUBE_API_BURST", "K_THREADS_PER_CONTROLLER"} {
		if n, err := strconv.Atoi(env[name].Value); err != nil || n <= 5 {
			t.Errorf("%s = %q, want a whole number above knative's default", name, env[name].Value)
		}
	}

	// Every ConfigMap sharedmain reads by name exists, and the Role lets the
	// controller get it.
	role := find[*rbacv1.Role](t, docs, "Role", "sandbox-snapshot-controller")
	gettable := sets.New[string]()
	for _, r := range role.Rules {
		if slices.Contains(r.Resources, "configmaps") && slices.Contains(r.Verbs, "get") {
			gettable.Insert(r.ResourceNames...)
		}
	}
	for _, name := range []string{"CONFIG_LOGGING_NAME", "CONFIG_OBSERVABILITY_NAME", "CONFIG_LEADERELECTION_NAME"} {
		cm := env[name].Value
		if cm == "" {
			t.Errorf("%s is not set", name)
			continue
		}
		find[*corev1.ConfigMap](t, docs, "ConfigMap", cm)
		if !gettable.Has(cm) {
			t.Errorf("the Role does not allow get on ConfigMap %s (%s)", cm, name)
		}
	}
	find[*corev1.ConfigMap](t, docs, "ConfigMap", config.SnapshotConfigName)

	// The restricted Pod Security level.
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Error("the pod must run as a numeric non-root user")
	}
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("the pod must use the RuntimeDefault seccomp profile")
	}
	sc := c.SecurityContext
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.Capabilities == nil || !reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 ||
		(sc.Privileged != nil && *sc.Privileged) {
		t.Errorf("container securityContext %+v is not restricted", sc)
	}
	if len(pod.Volumes) > 0 || pod.HostNetwork || pod.HostPID || pod.HostIPC {
		t.Error("the controller needs no volumes or host namespaces")
	}

	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Requests[r]; !ok {
			t.Errorf("no %s request", r)
		}
		if _, ok := c.Resources.Limits[r]; !ok {
			t.Errorf("no %s limit", r)
		}
	}

	// sharedmain serves /health and /readiness on port 8080.
	for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("no HTTP %s probe", name)
			continue
		}
		port := p.HTTPGet.Port.IntValue()
		for _, cp := range c.Ports {
			if cp.Name == p.HTTPGet.Port.String() {
				port = int(cp.ContainerPort)
			}
		}
		if port != 8080 {
			t.Errorf("%s probe on port %s, want 8080", name, p.HTTPGet.Port.String())
		}
	}
	if c.LivenessProbe != nil && c.LivenessProbe.HTTPGet != nil && c.LivenessProbe.HTTPGet.Path != "/health" {
		t.Errorf("liveness probe path %q, want /health", c.LivenessProbe.HTTPGet.Path)
	}
	if c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet != nil && c.ReadinessProbe.HTTPGet.Path != "/readiness" {
		t.Errorf("readiness probe path %q, want /readiness", c.ReadinessProbe.HTTPGet.Path)
	}
}

func TestKoConfig(t *testing.T) {
	raw, err := os.ReadFile(rootDir + "/.ko.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ko struct {
		DefaultBaseImage string `json:"defaultBaseImage"`
		Builds           []struct {
			ID      string   `json:"id"`
			Main    string   `json:"main"`
			Flags   []string `json:"flags"`
			Ldflags []string `json:"ldflags"`
		} `json:"builds"`
	}
	if err := yaml.UnmarshalStrict(raw, &ko); err != nil {
		t.Fatalf(".ko.yaml: %v", err)
	}
	if ko.DefaultBaseImage == "" {
		t.Error(".ko.yaml: no defaultBaseImage")
	}
	mains := sets.New[string]()
	for _, b := range ko.Builds {
		dir := filepath.Join(rootDir, b.Main)
		if _, err := os.Stat(filepath.Join(dir, "main.go")); err != nil {
			t.Errorf(".ko.yaml: build %q: %v", b.ID, err)
		}
		if !slices.Contains(b.Flags, "-trimpath") {
			t.Errorf(".ko.yaml: build %q lacks -trimpath", b.ID)
		}
		mains.Insert(modulePath + "/" + strings.TrimPrefix(filepath.ToSlash(filepath.Clean(b.Main)), "./"))
	}
	// Every ko:// image under config/ has a build configuration.
	for _, d := range operatorDocs(t) {
		for _, line := range strings.Split(string(d.raw), "\n") {
			if _, ref, ok := strings.Cut(line, "ko://"); ok {
				ref = strings.Trim(strings.TrimSpace(ref), `"'`)
				if !mains.Has(ref) {
					t.Errorf("%s: image ko://%s has no build in .ko.yaml", d, ref)
				}
			}
		}
	}
}

// configMapWithExample returns a ConfigMap of config/, after checking its
// _example block the way knative's configmap testing does, and the data its
// _example block documents.
func configMapWithExample(t *testing.T, name string) (*corev1.ConfigMap, map[string]string) {
	t.Helper()
	cm := find[*corev1.ConfigMap](t, operatorDocs(t), "ConfigMap", name)
	example, ok := cm.Data[configmap.ExampleKey]
	if !ok {
		t.Fatalf("ConfigMap %s has no %s block", name, configmap.ExampleKey)
	}
	if got, want := cm.Annotations[configmap.ExampleChecksumAnnotation], configmap.Checksum(example); got != want {
		t.Errorf("ConfigMap %s: annotation %s = %q, want %q", name, configmap.ExampleChecksumAnnotation, got, want)
	}
	for i, line := range strings.Split(example, "\n") {
		if strings.TrimRightFunc(line, unicode.IsSpace) != line {
			t.Errorf("ConfigMap %s: line %d of %s ends in white space", name, i+1, configmap.ExampleKey)
		}
	}
	documented := map[string]string{}
	if err := yaml.UnmarshalStrict([]byte(example), &documented); err != nil {
		t.Fatalf("ConfigMap %s: %s does not parse as string keys and values: %v", name, configmap.ExampleKey, err)
	}
	if len(documented) == 0 {
		t.Errorf("ConfigMap %s: %s documents no keys", name, configmap.ExampleKey)
	}
	return cm, documented
}

func TestConfigSnapshot(t *testing.T) {
	cm, documented := configMapWithExample(t, config.SnapshotConfigName)

	keys := []string{config.RegistryKey, config.PushSecretKey, config.RegistrySecretKey, config.InsecureRegistryKey, config.CommitTimeoutKey, config.PriorityClassKey,
		config.SnapshotModeKey, config.MemoryFallbackKey, config.MemoryRestoreBaseKey, config.MemoryAnonymousPullKey, config.CheckpointDirKey,
		config.ContainerdSocketKey, config.OverlayfsRootKey, config.NodePoolsKey, config.TaskNameKey, config.TaskBundleKey, config.DefaultClassKey,
		config.TaskRunRetentionSucceededKey, config.TaskRunRetentionFailedKey, config.ImageDeletionPolicyKey,
		config.ImageDeletionTimeoutKey, config.ImageCheckIntervalKey, config.ImageChecksPerMinuteKey, config.MaxLayersKey,
		config.MaxPauseKey, config.KeepLocalKey, config.KeepLocalMaxSizeKey, config.DiskReserveKey, config.CommitEphemeralStorageKey, config.RegistryCAConfigMapKey}
	if got := sets.KeySet(documented); !got.Equal(sets.New(keys...)) {
		t.Errorf("%s documents %v, want exactly the keys %v", configmap.ExampleKey, sets.List(got), keys)
	}

	// As shipped, the registry is unset: the dev scripts or the user set it.
	if _, ok := cm.Data[config.RegistryKey]; ok {
		t.Errorf("ConfigMap %s sets %s; leave it to the installer", config.SnapshotConfigName, config.RegistryKey)
	}
	shipped, _ := config.NewSnapshotFromConfigMap(cm)
	if !errors.Is(shipped.Err, config.ErrRegistryNotConfigured) {
		t.Errorf("as shipped, Err = %v, want only %v", shipped.Err, config.ErrRegistryNotConfigured)
	}

	// The documented example is valid, and every value it shows but the
	// registry's is the default.
	example, _ := config.NewSnapshotFromConfigMap(&corev1.ConfigMap{Data: documented})
	if example.Err != nil {
		t.Errorf("the documented example is invalid: %v", example.Err)
	}
	registryOnly := map[string]string{config.RegistryKey: documented[config.RegistryKey]}
	defaults, _ := config.NewSnapshotFromConfigMap(&corev1.ConfigMap{Data: registryOnly})
	for key, value := range documented {
		if key == config.RegistryKey {
			continue
		}
		data := map[string]string{config.RegistryKey: documented[config.RegistryKey], key: value}
		got, _ := config.NewSnapshotFromConfigMap(&corev1.ConfigMap{Data: data})
		if !reflect.DeepEqual(got, defaults) {
			t.Errorf("%s documents %s: %q, which is not the default:\n got %+v\nwant %+v", configmap.ExampleKey, key, value, got, defaults)
		}
	}
}

func TestConfigLogging(t *testing.T) {
	cm, documented := configMapWithExample(t, logging.ConfigMapName())
	component := componentName(t)
	for what, data := range map[string]map[string]string{"data": cm.Data, configmap.ExampleKey: documented} {
		cfg, err := logging.NewConfigFromMap(data)
		if err != nil {
			t.Errorf("%s: %v", what, err)
			continue
		}
		if _, ok := cfg.LoggingLevel[component]; !ok {
			t.Errorf("%s: no loglevel.%s (the component name of cmd/controller)", what, component)
		}
	}
	zc := zap.NewProductionConfig()
	if err := json.Unmarshal([]byte(cm.Data["zap-logger-config"]), &zc); err != nil {
		t.Errorf("zap-logger-config: %v", err)
	} else if _, err := zc.Build(); err != nil {
		t.Errorf("zap-logger-config: %v", err)
	}
}

func TestConfigObservability(t *testing.T) {
	cm, documented := configMapWithExample(t, "config-observability")
	if _, err := observability.NewFromMap(cm.Data); err != nil {
		t.Errorf("data: %v", err)
	}
	got, err := observability.NewFromMap(documented)
	if err != nil {
		t.Fatalf("%s: %v", configmap.ExampleKey, err)
	}
	if want := observability.DefaultConfig(); !reflect.DeepEqual(got, want) {
		t.Errorf("%s does not show the defaults:\n got %+v\nwant %+v", configmap.ExampleKey, got, want)
	}
}

// TestMetricsAreServed checks that the controller serves Prometheus metrics
// out of the box, on the container port its Service sends scrapes to.
func TestMetricsAreServed(t *testing.T) {
	docs := operatorDocs(t)
	cm := find[*corev1.ConfigMap](t, docs, "ConfigMap", "config-observability")
	cfg, err := observability.NewFromMap(cm.Data)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Metrics.Protocol != "prometheus" || cfg.Metrics.Endpoint != "" {
		t.Errorf("config-observability exports metrics as %q to %q, want prometheus on the default port 9090", cfg.Metrics.Protocol, cfg.Metrics.Endpoint)
	}
	dep := find[*appsv1.Deployment](t, docs, "Deployment", "sandbox-snapshot-controller")
	svc := find[*corev1.Service](t, docs, "Service", "sandbox-snapshot-controller")
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(dep.Spec.Template.Labels)) || len(svc.Spec.Selector) == 0 {
		t.Errorf("Service selector %v does not select the controller's pods %v", svc.Spec.Selector, dep.Spec.Template.Labels)
	}
	if len(svc.Spec.Ports) != 1 {
		t.Fatalf("Service ports %v, want one metrics port", svc.Spec.Ports)
	}
	target := svc.Spec.Ports[0].TargetPort.String()
	found := false
	for _, p := range dep.Spec.Template.Spec.Containers[0].Ports {
		if p.Name == target || strconv.Itoa(int(p.ContainerPort)) == target {
			found = p.ContainerPort == 9090
		}
	}
	if !found {
		t.Errorf("Service targetPort %q is not the controller's container port 9090", target)
	}
}

func TestConfigLeaderElection(t *testing.T) {
	cm, documented := configMapWithExample(t, "config-leader-election")
	if _, err := leaderelection.NewConfigFromConfigMap(cm); err != nil {
		t.Errorf("data: %v", err)
	}
	got, err := leaderelection.NewConfigFromMap(documented)
	if err != nil {
		t.Fatalf("%s: %v", configmap.ExampleKey, err)
	}
	want, _ := leaderelection.NewConfigFromConfigMap(nil)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s does not show the defaults:\n got %+v\nwant %+v", configmap.ExampleKey, got, want)
	}
}
