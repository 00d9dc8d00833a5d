"""One `sqlite:///` file shared by the processes of one host.

owner.py: one owner per file, whatever path names it (an exclusive `flock`); server.py: the
owner serves its open file to the other processes on a local socket (psyq's server);
client.py: every other process reaches the file through that socket (psyq's server client),
and takes the file over when its owner is gone (docs/design/0009)."""
