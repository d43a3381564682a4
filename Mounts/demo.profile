# The demo mount `make run` starts: the sample tree in Mounts/demo at Mounts/run/demo.
backing = demo
mountpoint = run/demo
coordination = exclusive
wait-timeout = 60
presenter-timeout = 5
# Seconds the kernel keeps names and attributes; changes made straight in demo/ show within it.
cache-timeout = 1
package-extensions = pkg
# Logs are told, never waited for.
mode *.log = notify
