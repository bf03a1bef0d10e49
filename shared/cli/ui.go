package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"time"
)

func init() {
	register(&command{
		name:    "ui",
		summary: "serve the status page: blocks on a timeline, groups, queues (read-only)",
		usage:   "[--listen 127.0.0.1:8080] [--tenant T]",
		aws:     true,
		help: `Serves, on a local address, the status page: per tenant a timeline of its
blocks by level (each a bar over its time range, coloured by state,
partitions and replicas stacked), its groups with their versions (click
one for its partitions, leases and outputs), the ranges waiting to close
and why, quarantined and rejected blocks, and what retention deletes next;
then every queue and its dead letters. Each load reads the records again
(as 'sluice status' does: one Query per tenant and per group, never a
LIST of the bucket); the page holds no script and changes nothing.
/status.json is the same report as 'sluice status --json'.

'sluice status --html FILE' writes the same page once, for a ticket.`,
		setup: func(fs *flag.FlagSet) runFunc {
			listen := fs.String("listen", "127.0.0.1:8080", "address to serve the page on")
			tenant := fs.String("tenant", "", "only this tenant")
			return func(ctx context.Context, e *Env, args []string) error {
				if err := checkTenantArgs(args, *tenant); err != nil {
					return err
				}
				d, err := e.openDeployment(ctx)
				if err != nil {
					return err
				}
				gather := func(ctx context.Context) (*StatusReport, error) {
					ov, ovErr := LoadOverrides(ctx, d.clients.S3, d.cfg)
					return GatherStatus(ctx, d.store, d.clients.SQS, d.cfg, StatusOptions{Tenant: *tenant, Detail: true,
						Overrides: ov, OverridesError: ovErr})
				}
				ln, err := net.Listen("tcp", *listen)
				if err != nil {
					return fmt.Errorf("ui: %w", err)
				}
				srv := &http.Server{Handler: StatusPage(gather), ReadHeaderTimeout: 10 * time.Second}
				fmt.Fprintf(e.Stdout, "serving the status page at http://%s/ (read-only; Ctrl-C stops)\n", ln.Addr())
				go func() {
					<-ctx.Done()
					sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
					defer cancel()
					_ = srv.Shutdown(sctx)
				}()
				if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
					return fmt.Errorf("ui: %w", err)
				}
				return nil
			}
		},
	})
}

// StatusPage serves the status page at / and its report at /status.json,
// each request read afresh by gather.
func StatusPage(gather func(context.Context) (*StatusReport, error)) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		rep, err := gather(r.Context())
		if err != nil {
			http.Error(w, "read the records: "+err.Error(), http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if err := rep.RenderHTML(w, true); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	mux.HandleFunc("GET /status.json", func(w http.ResponseWriter, r *http.Request) {
		rep, err := gather(r.Context())
		if err != nil {
			http.Error(w, "read the records: "+err.Error(), http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
	})
	return mux
}
