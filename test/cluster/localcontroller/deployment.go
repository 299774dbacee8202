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

package localcontroller

import (
	"errors"
	"fmt"
	"os"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/opensandbox-group/sandbox-snapshot-operator/test/cluster/manifests"
)

// containerName is the controller's container in its Deployment.
const containerName = "controller"

// ReadDeployment returns the Deployment of the file at path, which may hold
// other objects too (config/500-controller.yaml also holds a Service).
func ReadDeployment(path string) (*appsv1.Deployment, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	docs, err := manifests.Split(b)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	for _, doc := range docs {
		d := &appsv1.Deployment{}
		if err := yaml.Unmarshal(doc, d); err != nil {
			return nil, fmt.Errorf("parsing %s: %w", path, err)
		}
		if d.Kind == "Deployment" {
			return d, nil
		}
	}
	return nil, fmt.Errorf("%s holds no Deployment", path)
}

// Env returns the environment that Deployment d gives its controller
// container in the pod podName, as NAME=VALUE: literal values as they are,
// and the downward API's fields and resources filled in as the kubelet would.
func Env(d *appsv1.Deployment, podName string) ([]string, error) {
	c, err := container(d)
	if err != nil {
		return nil, err
	}
	env := make([]string, 0, len(c.Env))
	for _, e := range c.Env {
		v, err := value(d, c, podName, e)
		if err != nil {
			return nil, fmt.Errorf("Deployment %s, env %s: %w", d.Name, e.Name, err)
		}
		env = append(env, e.Name+"="+v)
	}
	return env, nil
}

func container(d *appsv1.Deployment) (*corev1.Container, error) {
	for i, c := range d.Spec.Template.Spec.Containers {
		if c.Name == containerName {
			return &d.Spec.Template.Spec.Containers[i], nil
		}
	}
	return nil, fmt.Errorf("Deployment %s has no container %q", d.Name, containerName)
}

func value(d *appsv1.Deployment, c *corev1.Container, podName string, e corev1.EnvVar) (string, error) {
	from := e.ValueFrom
	switch {
	case from == nil:
		return e.Value, nil
	case from.FieldRef != nil:
		switch from.FieldRef.FieldPath {
		case "metadata.namespace":
			return d.Namespace, nil
		case "metadata.name":
			return podName, nil
		}
		return "", fmt.Errorf("fieldRef %s is not supported", from.FieldRef.FieldPath)
	case from.ResourceFieldRef != nil:
		r := from.ResourceFieldRef
		if r.Resource != "limits.memory" || !r.Divisor.IsZero() {
			return "", fmt.Errorf("resourceFieldRef %s (divisor %s) is not supported", r.Resource, r.Divisor.String())
		}
		limit, ok := c.Resources.Limits[corev1.ResourceMemory]
		if !ok {
			return "", errors.New("container has no memory limit")
		}
		return fmt.Sprint(limit.Value()), nil
	}
	return "", errors.New("only value, fieldRef and resourceFieldRef are supported")
}
