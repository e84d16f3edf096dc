"""Wire protocols both sides of the HTTP speak (the harness's client and its sim), below both."""
