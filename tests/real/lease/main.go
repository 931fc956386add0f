// Command lease-client is the kubelet's node-lease loop and nothing else, for the partition lab: the
// real lease controller of k8s.io/component-helpers with the kubelet's parameters, over a transport
// built as the kubelet builds its own, plus one watch (an informer on its own Node) on the same
// HTTP/2 connection, as the kubelet's watches share it. One JSON line per request on stdout.
//
// Parameters, as the kubelet sets them (k8s.io/kubernetes v1.37.2): lease duration 40 s and renew
// fraction 0.25 (KubeletConfiguration defaults), heartbeat client Timeout = min(10 s, 40 s) and QPS -1
// (cmd/kubelet/app/server.go), protobuf, one owned http.Transport with a rotating dialer
// (pkg/kubelet/certificate.UpdateTransport: Talos sets rotateCertificates), CloseIdleConnectionsFor on
// repeated heartbeat failure, lease.NewController(...).Run (pkg/kubelet/kubelet.go).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/connrotation"
	"k8s.io/component-helpers/apimachinery/lease"
	"k8s.io/utils/clock"
)

var out = struct {
	sync.Mutex
	enc *json.Encoder
}{enc: json.NewEncoder(os.Stdout)}

func emit(v map[string]any) {
	v["t"] = float64(time.Now().UnixNano()) / 1e9
	out.Lock()
	defer out.Unlock()
	_ = out.enc.Encode(v)
}

// logged records every request of a client: method, path, start, end, status or error, and the
// local address of the connection it rode (the balancer's log names the backend of that connection).
type logged struct {
	client string
	next   http.RoundTripper
}

func (l logged) RoundTrip(req *http.Request) (*http.Response, error) {
	var local string
	var reused bool
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		if i.Conn != nil {
			local = i.Conn.LocalAddr().String()
		}
		reused = i.Reused
	}}
	start := time.Now()
	resp, err := l.next.RoundTrip(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
	rec := map[string]any{"client": l.client, "method": req.Method, "path": req.URL.Path,
		"start": float64(start.UnixNano()) / 1e9, "seconds": time.Since(start).Seconds(), "local": local, "reused": reused}
	if err != nil {
		rec["error"] = err.Error()
	} else {
		rec["status"] = resp.StatusCode
	}
	emit(rec)
	return resp, err
}

func main() {
	server := flag.String("server", "https://127.0.0.1:7445", "the apiserver, or the node's balancer")
	ca := flag.String("ca", "", "CA bundle of the apiservers")
	cert := flag.String("cert", "", "the kubelet's client certificate (CN=system:node:<node>, O=system:nodes)")
	key := flag.String("key", "", "its key")
	node := flag.String("node", "", "node name")
	leaseSec := flag.Int("node-lease-duration-seconds", 40, "KubeletConfiguration default")
	statusEvery := flag.Duration("node-status-update-frequency", 10*time.Second, "KubeletConfiguration default")
	getEvery := flag.Duration("get-interval", 0, "also GET the own Node this often (a workload-like client on the same connection); 0: none")
	flag.Parse()
	if *node == "" || *ca == "" || *cert == "" || *key == "" {
		fmt.Fprintln(os.Stderr, "lease-client: --node, --ca, --cert and --key are required")
		os.Exit(2)
	}

	cfg := &rest.Config{Host: *server, TLSClientConfig: rest.TLSClientConfig{CAFile: *ca, CertFile: *cert, KeyFile: *key}}
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cfg.QPS, cfg.Burst = 50, 100 // KubeletConfiguration kubeAPIQPS, kubeAPIBurst defaults
	cfg.UserAgent = "kubelet/v1.37.2 (linux/amd64) readyprism-lab"

	// One owned transport, as certificate.UpdateTransport builds it; every client below shares it,
	// so the watch and the lease PUTs ride one HTTP/2 connection.
	tlsCfg, err := rest.TLSConfigFor(cfg)
	check(err)
	dialer := connrotation.NewDialer((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
	tr := utilnet.SetTransportDefaults(&http.Transport{
		Proxy: http.ProxyFromEnvironment, TLSHandshakeTimeout: 10 * time.Second,
		TLSClientConfig: tlsCfg, MaxIdleConnsPerHost: 25, DialContext: dialer.DialContext,
	})
	base := rest.AnonymousClientConfig(cfg)
	base.TLSClientConfig = rest.TLSClientConfig{} // the TLS options live in tr now, as UpdateTransport leaves them
	base.ContentType, base.AcceptContentTypes, base.QPS, base.Burst, base.UserAgent =
		cfg.ContentType, cfg.AcceptContentTypes, cfg.QPS, cfg.Burst, cfg.UserAgent

	mainCfg := rest.CopyConfig(base)
	mainCfg.Transport = logged{client: "main", next: tr}
	mainClient := kubernetes.NewForConfigOrDie(mainCfg)

	hbCfg := rest.CopyConfig(base)
	hbCfg.Transport = logged{client: "lease", next: tr}
	hbCfg.Timeout = min(*statusEvery, time.Duration(*leaseSec)*time.Second) // cmd/kubelet/app/server.go
	hbCfg.QPS = -1
	heartbeat := kubernetes.NewForConfigOrDie(hbCfg)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	uid := register(ctx, mainClient, *node)

	// One informer on the own Node: a watch on the shared connection, as the kubelet's.
	factory := informers.NewSharedInformerFactoryWithOptions(mainClient, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", *node).String()
		}))
	factory.Core().V1().Nodes().Informer()
	factory.Start(ctx.Done())

	if *getEvery > 0 {
		go func() {
			t := time.NewTicker(*getEvery)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					_, _ = mainClient.CoreV1().Nodes().Get(ctx, *node, metav1.GetOptions{})
				}
			}
		}()
	}

	renew := time.Duration(float64(*leaseSec) * 0.25 * float64(time.Second)) // nodeLeaseRenewIntervalFraction
	ctrl := lease.NewController(clock.RealClock{}, heartbeat, *node, int32(*leaseSec),
		func() { emit(map[string]any{"event": "heartbeat-failure"}); utilnet.CloseIdleConnectionsFor(tr) },
		renew, *node, corev1.NamespaceNodeLease, ownedBy(*node, uid))
	emit(map[string]any{"event": "started", "node": *node, "renew_seconds": renew.Seconds()})
	ctrl.Run(ctx)
}

// register creates the Node, as the kubelet registers itself, and marks it Ready once; from then on
// only the lease says it is alive, and kube-controller-manager's node lifecycle controller decides.
func register(ctx context.Context, c kubernetes.Interface, name string) string {
	for {
		n, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels: map[string]string{"kubernetes.io/hostname": name}}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			n, err = c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		}
		if err == nil {
			now := metav1.Now()
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
				Reason: "KubeletReady", Message: "readyprism lab lease client", LastHeartbeatTime: now, LastTransitionTime: now}}
			if _, err = c.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err == nil {
				emit(map[string]any{"event": "registered", "node": name})
				return string(n.UID)
			}
		}
		emit(map[string]any{"event": "register-failed", "error": err.Error()})
		select {
		case <-ctx.Done():
			os.Exit(1)
		case <-time.After(time.Second):
		}
	}
}

// ownedBy sets the Node as the lease's owner, as the kubelet's SetNodeOwnerFunc does.
func ownedBy(node, uid string) lease.ProcessLeaseFunc {
	return func(l *coordinationv1.Lease) error {
		if len(l.OwnerReferences) == 0 {
			l.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node, UID: types.UID(uid)}}
		}
		return nil
	}
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "lease-client:", err)
		os.Exit(1)
	}
}
