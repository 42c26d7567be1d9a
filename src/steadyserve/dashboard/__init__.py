"""The dashboard's static page (HTML, script, vendored uPlot), served by the controller."""
