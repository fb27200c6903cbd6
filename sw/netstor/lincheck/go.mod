module netstor/netlr/lincheck

go 1.21

require github.com/anishathalye/porcupine v1.3.1
