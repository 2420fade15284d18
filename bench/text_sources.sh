#!/usr/bin/env bash
# Offline English text for `python -m specviz distill --text ...` (teacher-forced soft labels).
# Not part of setup.sh: only a distillation run needs it, and the tests never do.
#
#   bash bench/text_sources.sh          # installs the Debian packages below (root, network)
#
# What each gives (Debian 12 "bookworm"; distill records every file it read with its sha256):
#   python3.11-doc       /usr/share/doc/python3.11/html       the Python docs as HTML (~67 MB)
#   debian-reference-en  /usr/share/debian-reference          the Debian Reference, HTML + .txt.gz
# then, for example:
#   python -m specviz distill ... --text /usr/share/doc/python3.11/html/tutorial \
#       --text /usr/share/doc/python3.11/html/howto --text /usr/share/debian-reference/debian-reference.en.txt.gz
set -euo pipefail
PACKAGES="python3.11-doc debian-reference-en"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends $PACKAGES
dpkg-query -W $PACKAGES
